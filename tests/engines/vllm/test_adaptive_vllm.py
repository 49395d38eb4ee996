"""Timeouts, breakers and the degrade hook against the real in-process AsyncLLM (tiny model)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig
from llm_guard_sdk.degrade import Degrader
from llm_guard_sdk.vllm import VLLMGuard
from tests.support import FakeSource, until

pytestmark = [pytest.mark.anyio, pytest.mark.vllm]


def params(max_tokens: int) -> Any:
    from vllm import SamplingParams

    return SamplingParams(max_tokens=max_tokens, ignore_eos=True)


class Recorder:
    """Wraps ``engine.generate``: records each request's max_tokens and tokens generated; with
    ``stall_after`` it stops passing outputs on after that many, as a stalled backend would,
    while the request keeps running in the engine."""

    def __init__(self, engine: Any, stall_after: int | None = None) -> None:
        self.generate = engine.generate
        self.stall_after = stall_after
        self.max_tokens: list[int | None] = []
        self.tokens = 0
        self.finish_reasons: list[str | None] = []

    async def __call__(self, prompt: Any, sampling: Any, rid: str) -> AsyncIterator[Any]:
        self.max_tokens.append(sampling.max_tokens)
        passed = 0
        async with contextlib.aclosing(self.generate(prompt, sampling, rid)) as outputs:
            async for out in outputs:
                for completion in out.outputs:
                    self.tokens += len(completion.token_ids)
                    if out.finished:
                        self.finish_reasons.append(completion.finish_reason)
                yield out
                passed += 1
                if passed == self.stall_after:
                    await asyncio.Event().wait()


async def settle(engine: Any) -> None:
    await until(lambda: engine.get_num_unfinished_requests() == 0, timeout=60)


async def test_stalled_backend_is_timed_out_aborted_and_counted_by_the_breaker(
        engine_bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_bundle["engine"]
    await settle(engine)
    guard = Guard(GuardConfig.defaults(sources=("process",), chunk_timeout=0.5,
                                       sample_interval=0.05), extensions=["breakers"])
    vg = VLLMGuard(engine, guard, kv=engine_bundle["kv"])
    recorder = Recorder(engine, stall_after=2)
    monkeypatch.setattr(engine, "generate", recorder)
    session = guard.registry.open("http")
    stream = vg.stream("stall", params(2000), session=session)
    received: list[str] = []

    async def consume() -> None:
        async for text in stream:
            received.append(text)

    guard.ensure_started()
    try:
        await asyncio.wait_for(consume(), timeout=120)
        await settle(engine)  # the engine was told: 2000 tokens are not run to the end
    finally:
        await guard.stop()
    assert stream.close_reason is CloseReason.TIMEOUT and guard.timeouts.closed_total == 1
    assert len(received) <= 2 and recorder.finish_reasons in ([], ["abort"])
    assert recorder.tokens < 2000
    assert (vg.aborted_total, vg.completed_total, vg.errors_total) == (1, 0, 0)
    breaker = guard.status()["breakers"]["vllm"]
    assert breaker["failures_total"] == {"timeout": 1} and breaker["state"] == "closed"


async def test_warn_level_caps_max_tokens_of_the_real_engine(
        engine_bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_bundle["engine"]
    await settle(engine)
    source = FakeSource(used=800)  # warn: headroom (0.92 - 0.80) / (0.92 - 0.75)
    guard = Guard(GuardConfig.defaults(sources=("process",), degrade="warn"), sources=[source])
    vg = VLLMGuard(engine, guard, kv=engine_bundle["kv"])
    recorder = Recorder(engine)
    monkeypatch.setattr(engine, "generate", recorder)
    capped = [text async for text in vg.stream("degrade me", params(100))]
    source.used = 0
    guard.sample_now()
    await settle(engine)
    full_before = recorder.tokens
    full = [text async for text in vg.stream("full", params(100))]
    assert recorder.max_tokens == [71, 100]
    assert full_before == 71 and recorder.tokens - full_before == 100
    assert recorder.finish_reasons == ["length", "length"]
    assert 0 < len(capped) <= 71 and 0 < len(full) <= 100  # text deltas: one per token at most
    assert isinstance(guard.extension("degrade"), Degrader)
    assert guard.status()["degraded"] == {"max_tokens": 1, "model": 0, "history": 0,
                                          "hook_errors": 0, "considered": 1}
