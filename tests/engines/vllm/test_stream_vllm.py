"""stream_vllm / VLLMGuard against a real in-process AsyncLLM (tiny model, CPU)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig
from llm_guard_sdk.errors import BackendError, DuplicateRequestError, InvalidRequestError
from llm_guard_sdk.vllm import VLLMGuard, VLLMSettings, kv_bytes_per_token, stream_vllm

pytestmark = [pytest.mark.anyio, pytest.mark.vllm]


def params(max_tokens: int, **extra: Any) -> Any:
    from vllm import SamplingParams

    return SamplingParams(max_tokens=max_tokens, ignore_eos=True, **extra)


@pytest.fixture
def vg(engine_bundle: dict[str, Any], guard: Guard) -> VLLMGuard:
    return VLLMGuard(engine_bundle["engine"], guard, kv=engine_bundle["kv"],
                     settings=VLLMSettings.defaults(max_waiting_requests=1))


async def settle(engine: Any) -> None:
    """Wait until the engine holds no request (other tests' leftovers would skew counts)."""
    for _ in range(200):
        if engine.get_num_unfinished_requests() == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("engine still has unfinished requests")


async def test_kv_bytes_per_token_matches_model_config(vg: VLLMGuard) -> None:
    # tiny model: 2 layers x 4 KV heads x head size 32, float32 -> 2 * 2 * 4 * 32 * 4
    assert kv_bytes_per_token(vg.engine) == 2 * 2 * 4 * 32 * 4 == vg.bytes_per_token


async def test_session_kv_bytes_follow_streamed_tokens(vg: VLLMGuard, guard: Guard) -> None:
    await settle(vg.engine)
    session = guard.registry.open("http")
    prompt_ids = [5, 6, 7, 8, 9, 10, 11]
    seen: list[int] = []
    # stream_outputs yields every engine output, also one whose text is empty (the text
    # stream skips those, and how vLLM groups tokens into outputs depends on the machine).
    async for _chunk in vg.stream_outputs(prompt_ids, params(40), session=session):
        seen.append(session.backend_bytes)
    generated_total = 40
    # After the last delta the session holds prompt + all generated tokens; each step grows.
    assert seen == sorted(seen)
    assert seen[-1] == (len(prompt_ids) + generated_total) * vg.bytes_per_token
    assert all(b % vg.bytes_per_token == 0 for b in seen)
    assert session.backend_bytes == 0  # released when the request ended
    assert vg.completed_total >= 1


async def test_two_concurrent_streams_of_one_session_sum_kv_bytes(vg: VLLMGuard,
                                                                  guard: Guard) -> None:
    await settle(vg.engine)
    session = guard.registry.open("websocket")
    first = vg.stream([5, 6, 7], params(30), session=session)
    second = vg.stream([5, 6, 7, 8, 9], params(30), session=session)
    await anext(first)
    await anext(second)  # max_num_seqs=2: both run at once
    for _ in range(5):
        await anext(first)
        await anext(second)
        held = (first.backend_bytes, second.backend_bytes)
        assert all(held) and session.backend_bytes == sum(held)
    remaining = second.backend_bytes
    await first.aclose()
    assert session.backend_bytes == remaining  # the first to end zeroes only its own
    await second.aclose()
    assert session.backend_bytes == 0
    await settle(vg.engine)


async def test_aclose_mid_stream_aborts_request(vg: VLLMGuard, guard: Guard) -> None:
    await settle(vg.engine)
    session = guard.registry.open("http")
    stream = vg.stream("hello there", params(400), session=session)
    await anext(stream)
    assert vg.engine.get_num_unfinished_requests() == 1
    before = vg.aborted_total
    await stream.aclose()
    assert vg.engine.get_num_unfinished_requests() == 0
    assert vg.aborted_total == before + 1
    assert session.backend_bytes == 0


async def test_session_eviction_aborts_blocked_stream(vg: VLLMGuard, guard: Guard) -> None:
    await settle(vg.engine)
    session = guard.registry.open("websocket")
    stream = vg.stream("evict me", params(400), session=session)
    first = asyncio.Event()

    async def consume() -> None:
        async for _text in stream:
            first.set()
            await asyncio.sleep(0.01)  # a slow client

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 10)
    await guard.close_session(session, CloseReason.EVICTED)
    await asyncio.wait_for(task, 5)
    assert stream.close_reason is CloseReason.EVICTED
    assert vg.engine.get_num_unfinished_requests() == 0
    assert guard.status()["sessions"]["evicted_total"] == 1


async def test_token_ids_text_and_chat_prompts(vg: VLLMGuard) -> None:
    await settle(vg.engine)
    for kwargs in ({"prompt": [1, 2, 3]}, {"prompt": "plain text"},
                   {"messages": [{"role": "user", "content": "hi"}]}):
        chunks = [t async for t in vg.stream(sampling_params=params(5), **kwargs)]
        assert chunks, kwargs
    assert vg.engine.get_num_unfinished_requests() == 0


async def test_request_ids_unique_and_duplicates_rejected(vg: VLLMGuard) -> None:
    await settle(vg.engine)
    first = vg.stream("a", params(200), request_id="dup-1")
    await anext(first)
    with pytest.raises(DuplicateRequestError) as info:
        vg.stream("b", params(5), request_id="dup-1")
    assert info.value.status == 409
    await first.aclose()
    with pytest.raises(InvalidRequestError):
        vg.stream("c", params(5), request_id="bad id with spaces")
    streams = [vg.stream("x", params(300)) for _ in range(3)]
    for stream in streams:
        await anext(stream)
    assert len(set(vg.inflight_ids())) == 3
    assert all(rid.startswith("llmg-") and len(rid) >= 20 for rid in vg.inflight_ids())
    unstarted = vg.stream("never started", params(5))
    await unstarted.aclose()
    for stream in streams:
        await stream.aclose()
    assert vg.inflight_ids() == ()
    await settle(vg.engine)


async def test_prompt_longer_than_context_is_a_clear_400(vg: VLLMGuard) -> None:
    await settle(vg.engine)
    aborted = vg.aborted_total
    stream = vg.stream(list(range(10, 610)), params(5))
    with pytest.raises(InvalidRequestError) as info:
        await anext(stream)
    assert info.value.status == 400
    assert "maximum context length" in info.value.message
    assert stream.closed and stream.close_reason is CloseReason.ERROR
    assert vg.engine.get_num_unfinished_requests() == 0
    assert vg.aborted_total == aborted  # rejected, never queued: nothing was aborted


async def test_rejected_sampling_params_are_a_clear_400(vg: VLLMGuard) -> None:
    await settle(vg.engine)
    stream = vg.stream("hi", params(5, logprobs=10_000))
    with pytest.raises(InvalidRequestError) as info:
        await anext(stream)
    assert "logprobs" in info.value.message.lower()
    assert vg.engine.get_num_unfinished_requests() == 0
    with pytest.raises(InvalidRequestError):
        vg.stream("hi", sampling_params={"max_tokens": 5})


async def test_engine_failure_before_the_first_token_is_a_500(
        vg: VLLMGuard, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a validation error: the client gets a 500 without internals, counted; aborted."""
    await settle(vg.engine)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise ValueError("internal bug: /srv/engine/state.py line 12")

    monkeypatch.setattr(vg.engine.output_processor, "add_request", broken)
    aborts: list[str] = []
    real_abort = vg.engine.abort

    async def recording_abort(request_id: Any, internal: bool = False) -> None:
        aborts.append(request_id)
        await real_abort(request_id, internal)

    monkeypatch.setattr(vg.engine, "abort", recording_abort)
    stream = vg.stream("hi", params(5), request_id="fails-early")
    with pytest.raises(BackendError) as info:
        await anext(stream)
    assert info.value.status == 500 and info.value.reason == "engine_error"
    assert "internal bug" not in info.value.message
    assert "fails-early" in aborts
    assert vg.errors_by_status == {500: 1} and vg.status()["errors_by_status"] == {"500": 1}
    monkeypatch.undo()
    await settle(vg.engine)


async def test_exception_mid_stream_aborts_the_running_request(
        vg: VLLMGuard, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure between tokens (here a wrapper around generate) still frees the engine."""
    await settle(vg.engine)
    real_generate = vg.engine.generate

    async def flaky(prompt: Any, sampling: Any, rid: str) -> Any:
        produced = 0
        async for out in real_generate(prompt, sampling, rid):
            yield out
            produced += 1
            if produced == 2:
                raise RuntimeError("wrapper bug")

    monkeypatch.setattr(vg.engine, "generate", flaky)
    stream = vg.stream("hi", params(400))
    with pytest.raises(BackendError) as info:
        async for _ in stream:
            pass
    assert info.value.status == 500
    assert vg.errors_total == 1 and vg.aborted_total == 0
    monkeypatch.undo()
    await settle(vg.engine)  # the request was aborted, not left running to 400 tokens
    assert vg.inflight_ids() == ()


async def test_backpressure_sheds_when_waiting_queue_is_long(vg: VLLMGuard,
                                                             guard: Guard) -> None:
    """max_num_seqs=2: the third and later requests wait; over max_waiting_requests=1, shed."""
    await settle(vg.engine)
    streams = [vg.stream(f"q{i}", params(300)) for i in range(5)]
    tasks = [asyncio.create_task(_drain(s)) for s in streams]
    reasons: set[str | None] = set()
    # Poll until the queue is seen full or every request finished: the engine's stat logger
    # reports the queue once per engine step, however slow the machine is.
    while "engine_queue_full" not in reasons and not all(t.done() for t in tasks):
        refusal = vg.admission_error()  # engine requests are refused, not sessions
        reasons.add(refusal.reason if refusal is not None else None)
        assert guard.admit() is None
        await asyncio.sleep(0.01)
    status = guard.status()["vllm"]
    await asyncio.gather(*tasks)
    assert "engine_queue_full" in reasons
    await settle(vg.engine)
    await asyncio.sleep(0.1)
    assert vg.admission_error() is None  # queue drained: service resumes
    assert status["waiting"] >= 2


async def test_status_section_and_kv_source(vg: VLLMGuard, guard: Guard) -> None:
    await settle(vg.engine)
    stream = vg.stream("status", params(100))
    await anext(stream)
    guard.sample_now()
    doc = guard.status()
    assert set(doc["vllm"]) >= {"running", "waiting", "kv_cache_usage", "aborted_total"}
    assert "vllm_kv" in doc["memory"]["sources"]
    source = doc["memory"]["sources"]["vllm_kv"]
    assert source["limit_bytes"] == vg.kv_capacity_bytes()
    assert 0 < source["pressure"] <= 1
    await stream.aclose()
    await settle(vg.engine)
    guard.sample_now()
    assert guard.status()["memory"]["sources"]["vllm_kv"]["used_bytes"] == 0


async def test_stream_vllm_without_guard(engine_bundle: dict[str, Any]) -> None:
    engine = engine_bundle["engine"]
    await settle(engine)
    text = [t async for t in stream_vllm(engine, "no guard", params(8))]
    assert text
    stream = stream_vllm(engine, "no guard", params(300))
    await anext(stream)
    await stream.aclose()
    assert engine.get_num_unfinished_requests() == 0


async def test_stream_vllm_uses_guard_integration(engine_bundle: dict[str, Any]) -> None:
    from llm_guard_sdk.context import bind_guard, reset_guard

    guard = Guard(GuardConfig.defaults(sources=("process",)))
    vg = VLLMGuard(engine_bundle["engine"], guard, kv=engine_bundle["kv"])
    token = bind_guard(guard)
    try:
        stream = stream_vllm(engine_bundle["engine"], "via guard", params(300))
    finally:
        reset_guard(token)
    await anext(stream)
    await stream.aclose()
    assert vg.aborted_total == 1 and vg.requests_total == 1


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


async def test_abort_unknown_request_id_is_harmless(vg: VLLMGuard) -> None:
    await settle(vg.engine)
    assert await vg.abort("never-existed") is False
    stream = vg.stream("known", params(300), request_id="known-1")
    await anext(stream)
    before = vg.aborted_total
    assert await vg.abort("known-1") is True
    async for _ in stream:  # vLLM ends the aborted request without raising
        pass
    assert stream.closed
    assert vg.aborted_total == before + 1  # counted once, from finish_reason="abort"
    assert vg.inflight_ids() == ()
    await settle(vg.engine)
