"""The vLLM engine path over a fake engine (no vLLM needed): engine refusals at engine
admission only, the circuit breaker (dead engine, failures, timeouts, half-open recovery) and
the degrade hook (max_tokens cap, fallback model)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from llm_guard_sdk import Guard, GuardConfig
from llm_guard_sdk.breakers import BreakerOpenError, Breakers, BreakerSettings
from llm_guard_sdk.degrade import DegradeDecision, Degrader, DegradeRequest
from llm_guard_sdk.engines.vllm import VLLMGuard, streaming
from llm_guard_sdk.engines.vllm.deps import VLLMErrors
from llm_guard_sdk.errors import BackendError, BackendOverloadedError, BackendUnavailableError
from llm_guard_sdk.session import CloseReason
from tests.support import FakeSource, until

pytestmark = pytest.mark.anyio


class DeadError(Exception):
    """Stands in for ``EngineDeadError``."""


class BadRequest(Exception):
    """Stands in for ``VLLMClientError``."""


class Engine:
    """Streams ``tokens`` deltas (or stalls after ``stall_after``), then raises ``fail``."""

    def __init__(self, tokens: int = 3, *, fail: BaseException | None = None,
                 stall_after: int | None = None) -> None:
        self.tokens, self.fail, self.stall_after = tokens, fail, stall_after
        self.errored = False
        self.calls: list[tuple[str, Any]] = []
        self.aborted: list[str] = []
        self.vllm_config = SimpleNamespace(cache_config=SimpleNamespace(num_gpu_blocks=None))

    async def generate(self, prompt: Any, params: Any, rid: str) -> AsyncIterator[Any]:
        self.calls.append((rid, params))
        for i in range(self.tokens):
            if i == self.stall_after:
                await asyncio.Event().wait()  # a stalled backend: never another token
            last = i == self.tokens - 1 and self.fail is None
            yield SimpleNamespace(prompt_token_ids=[1], finished=last, outputs=[SimpleNamespace(
                token_ids=[i], text=f"t{i} ", finish_reason="length" if last else None)])
        if self.fail is not None:
            raise self.fail

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)

    def get_num_unfinished_requests(self) -> int:
        return 0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def no_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streaming, "vllm_errors",
                        lambda: VLLMErrors((DeadError,), (BadRequest,)))
    monkeypatch.setattr(streaming, "delta_params", lambda params: params)
    monkeypatch.setattr(streaming, "kv_bytes_per_token", lambda engine: 64)


def wired(engine: Engine, *, used: int = 0, clock: Clock | None = None,
          **vllm: Any) -> tuple[Guard, VLLMGuard]:
    breakers = Breakers(BreakerSettings.defaults(failures=2, window=30, open_for=10, probes=1),
                        clock=clock or Clock())
    guard = Guard(GuardConfig.defaults(sources=("process",), retry_after=7),
                  sources=[FakeSource(used=used)], extensions=[breakers])
    return guard, VLLMGuard(engine, guard, **vllm)


async def drain(stream: AsyncIterator[str]) -> list[str]:
    return [text async for text in stream]


def params(max_tokens: int | None = 100) -> SimpleNamespace:
    return SimpleNamespace(max_tokens=max_tokens)


# -- engine_dead / engine_queue_full refuse engine requests, not sessions ----------------------


async def test_dead_engine_and_full_queue_refuse_engine_requests_only() -> None:
    engine = Engine()
    guard = Guard(GuardConfig.defaults(sources=("process",), retry_after=7),
                  sources=[FakeSource()])
    vg = VLLMGuard(engine, guard, max_waiting_requests=1)
    vg.kv.num_waiting_reqs = 2
    with pytest.raises(BackendOverloadedError) as full:
        await anext(vg.stream("hi", params()))
    engine.errored = True
    with pytest.raises(BackendUnavailableError) as dead:
        await anext(vg.stream("hi", params()))
    assert guard.admit() is None  # other routes still admitted
    assert (full.value.status, full.value.reason, full.value.retry_after) == (
        503, "engine_queue_full", 7)
    assert (dead.value.status, dead.value.reason, dead.value.headers()) == (
        503, "engine_dead", {"retry-after": "7"})
    assert engine.calls == []
    assert guard.status()["vllm"]["refused_by_reason"] == {"engine_queue_full": 1,
                                                           "engine_dead": 1}
    assert guard.status()["actions"]["shed_by_reason"] == {}


# -- the circuit breaker -----------------------------------------------------------------------


async def test_dead_engine_opens_the_breaker_then_half_open_recovers() -> None:
    clock = Clock()
    engine = Engine(2, fail=DeadError("engine core died"))
    guard, vg = wired(engine, clock=clock)
    with pytest.raises(BackendUnavailableError):
        await drain(vg.stream("hi", params()))
    assert guard.status()["breakers"]["vllm"]["state"] == "open"  # tripped at once

    engine.fail = None  # (a restarted engine in real life)
    with pytest.raises(BreakerOpenError) as refused:
        await anext(vg.stream("hi", params()))
    assert (refused.value.status, refused.value.reason) == (503, "circuit_open")
    assert refused.value.headers() == {"retry-after": "10"}
    assert len(engine.calls) == 1  # the engine was not touched

    clock.now += 10  # open_for elapsed: one probe may pass
    probe = vg.stream("probe", params())
    assert await anext(probe) == "t0 "
    with pytest.raises(BreakerOpenError):  # probes=1: the second waits on the probe's answer
        await anext(vg.stream("other", params()))
    assert await drain(probe) == ["t1 "]
    doc = guard.status()["breakers"]["vllm"]
    assert doc["state"] == "closed" and doc["opened_total"] == 1
    assert doc["failures_total"] == {"dead": 1} and doc["refused_total"] == 2
    assert await drain(vg.stream("hi", params())) == ["t0 ", "t1 "]
    assert guard.status()["vllm"]["refused_by_reason"] == {"circuit_open": 2}


async def test_a_known_dead_engine_trips_the_breaker_without_being_called() -> None:
    engine = Engine()
    engine.errored = True
    guard, vg = wired(engine)
    with pytest.raises(BackendUnavailableError):
        await anext(vg.stream("hi", params()))
    with pytest.raises(BreakerOpenError):
        await anext(vg.stream("hi", params()))
    assert engine.calls == []
    assert guard.status()["breakers"]["vllm"]["failures_total"] == {"dead": 1}


async def test_server_errors_open_it_client_errors_and_load_do_not() -> None:
    engine = Engine(1, fail=BadRequest("max_tokens too large"))
    guard, vg = wired(engine, max_waiting_requests=1)
    for _ in range(3):
        with pytest.raises(BackendError) as bad:
            await drain(vg.stream("hi", params()))
        assert bad.value.status == 400
    vg.kv.num_waiting_reqs = 5
    for _ in range(3):
        with pytest.raises(BackendOverloadedError):
            await anext(vg.stream("hi", params()))
    assert guard.status()["breakers"]["vllm"]["state"] == "closed"
    vg.kv.num_waiting_reqs = 0
    engine.fail = RuntimeError("engine bug")
    for _ in range(2):
        with pytest.raises(BackendError) as failed:
            await drain(vg.stream("hi", params()))
        assert failed.value.status == 500
    doc = guard.status()["breakers"]["vllm"]
    assert doc["state"] == "open" and doc["failures_total"] == {"error": 2}


@pytest.mark.parametrize(("reason", "failures"), [
    (CloseReason.TIMEOUT, {"timeout": 1}), (CloseReason.DISCONNECTED, {})])
async def test_a_stream_timed_out_counts_a_timeout_a_client_gone_nothing(
        reason: CloseReason, failures: dict[str, int]) -> None:
    engine = Engine(5, stall_after=1)
    guard, vg = wired(engine)
    stream = vg.stream("hi", params(), request_id="stall-1")
    assert await anext(stream) == "t0 "
    consumer = asyncio.create_task(drain(stream))
    await until(lambda: stream.waiting, timeout=10)
    await stream.request_close(reason)  # what the guard's timeouts do to a stalled stream
    assert await asyncio.wait_for(consumer, timeout=10) == []
    assert engine.aborted == ["stall-1"] and vg.inflight_ids() == ()
    doc = guard.status()["breakers"]["vllm"]
    assert doc["failures_total"] == failures and doc["state"] == "closed"


# -- the degrade hook --------------------------------------------------------------------------


async def test_degrade_caps_max_tokens_of_the_engine_request_at_warn() -> None:
    engine = Engine()
    guard, vg = wired(engine, used=800)  # warn: headroom (0.92 - 0.8) / (0.92 - 0.75)
    guard.add_extension(Degrader())
    guard.sample_now()
    await drain(vg.stream("hi", params(100)))
    await drain(vg.stream("hi", params(None)))  # the engine's default: left alone
    guard.sources[0].used = 0  # type: ignore[attr-defined]
    guard.sample_now()
    await drain(vg.stream("hi", params(100)))
    assert [p.max_tokens for _, p in engine.calls] == [71, None, 100]
    assert guard.status()["degraded"]["max_tokens"] == 1


async def test_degrade_can_switch_to_a_fallback_engine_and_aborts_there() -> None:
    big, small = Engine(), Engine(5, stall_after=1)

    def hook(request: DegradeRequest) -> DegradeDecision:
        return DegradeDecision(model="small")

    guard, vg = wired(big, used=800, fallbacks={"small": small})
    guard.add_extension(Degrader(hook))
    guard.sample_now()
    stream = vg.stream("hi", params(), request_id="fb-1")
    assert await anext(stream) == "t0 "
    assert vg.inflight_ids() == ("fb-1",)
    assert await vg.abort("fb-1") is True
    await stream.aclose()
    assert big.calls == [] and [rid for rid, _ in small.calls] == ["fb-1"]
    assert small.aborted[0] == "fb-1" and big.aborted == []
    assert guard.status()["degraded"]["model"] == 1


async def test_a_raising_degrade_hook_never_fails_the_request() -> None:
    engine = Engine()

    def hook(request: DegradeRequest) -> DegradeDecision:
        raise RuntimeError("hook bug")

    guard, vg = wired(engine, used=800)
    guard.add_extension(Degrader(hook))
    guard.sample_now()
    assert await drain(vg.stream("hi", params(100))) == ["t0 ", "t1 ", "t2 "]
    assert engine.calls[0][1].max_tokens == 100
    assert guard.status()["degraded"]["hook_errors"] == 1
