"""The production-shaped wrapper on a real engine: full outputs, generate() pass-through."""

from __future__ import annotations

import functools
import logging
from typing import Any

import pytest

from llm_guard_sdk import Guard
from llm_guard_sdk.vllm import KVStats, OutputChunk, VLLMGuard

pytestmark = [pytest.mark.anyio, pytest.mark.vllm]


def params(max_tokens: int, **extra: Any) -> Any:
    from vllm import SamplingParams

    return SamplingParams(max_tokens=max_tokens, ignore_eos=True, **extra)


@pytest.fixture
def vg(engine_bundle: dict[str, Any], guard: Guard) -> VLLMGuard:
    return VLLMGuard(engine_bundle["engine"], guard, kv=engine_bundle["kv"])


async def test_full_outputs_cover_all_n_completions(vg: VLLMGuard) -> None:
    prompt = [5, 6, 7, 8, 9]
    chunks: list[OutputChunk] = [c async for c in vg.stream_outputs(prompt, params(6, n=2))]
    ids: dict[int, list[int]] = {0: [], 1: []}
    reasons: dict[int, str | None] = {}
    for chunk in chunks:
        assert chunk.prompt_tokens == len(prompt)
        for delta in chunk.outputs:
            ids[delta.index] += delta.token_ids
            reasons[delta.index] = delta.finish_reason or reasons.get(delta.index)
            assert delta.completion_tokens == len(ids[delta.index])
    assert chunks[-1].finished and not any(c.finished for c in chunks[:-1])
    assert {i: len(t) for i, t in ids.items()} == {0: 6, 1: 6}
    assert reasons == {0: "length", 1: "length"}
    assert chunks[-1].completion_tokens == 12
    assert chunks[-1].total_tokens == 12 + len(prompt)
    assert vg.completed_total >= 1


async def test_generate_keywords_pass_through(vg: VLLMGuard, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    seen: list[dict[str, Any]] = []
    original = vg.engine.generate

    @functools.wraps(original)  # keeps the signature the kwargs are checked against
    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(vg.engine, "generate", spy)
    text = [t async for t in vg.stream("hello", params(3), priority=0,
                                       trace_headers={"traceparent": "00-ab-cd-01"})]
    assert text and seen == [{"priority": 0, "trace_headers": {"traceparent": "00-ab-cd-01"}}]


async def test_unknown_generate_keyword_is_a_clear_error(vg: VLLMGuard) -> None:
    with pytest.raises(TypeError, match=r"does not take colour.*lora_request.*priority"):
        vg.stream("hello", params(3), colour="red")
    with pytest.raises(TypeError, match="does not take lora"):
        vg.stream_outputs("hello", params(3), lora=None)
    assert vg.requests_total == 0


async def test_missing_kv_statistics_are_reported_once(engine_bundle: dict[str, Any],
                                                       guard: Guard,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    vg = VLLMGuard(engine_bundle["engine"], guard, kv=KVStats())  # a logger vLLM never feeds
    with caplog.at_level(logging.WARNING, logger="llm_guard_sdk"):
        await guard.tick()
        assert "stat_loggers" not in caplog.text  # nothing ran yet: nothing to expect
        # Token outputs, not text: two sampled tokens of the tiny model may decode to no text
        # at all (partial UTF-8), and what matters here is that a request ran to its end.
        chunks = [c async for c in vg.stream_outputs("hello", params(2))]
        assert chunks and chunks[-1].finished and vg.completed_total == 1
        await guard.tick()
        await guard.tick()
    lines = [r.getMessage() for r in caplog.records if "stat_loggers" in r.getMessage()]
    assert len(lines) == 1
    assert "stat_loggers=[kv.logger_factory()]" in lines[0] and "kv=kv" in lines[0]
    assert vg.status()["kv_stats_records"] == 0
