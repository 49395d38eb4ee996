"""The vLLM integration over a fake engine (no vLLM needed): how errors reach the client, that
every unfinished request is aborted, and KV-cache pressure refusing only engine requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI

from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware
from llm_guard_sdk.adapters.fastapi import sse_response
from llm_guard_sdk.engines.vllm import VLLMGuard, VLLMStreams, streaming
from llm_guard_sdk.engines.vllm.deps import VLLMErrors
from llm_guard_sdk.errors import BackendError, BackendOverloadedError
from tests.support import FakeSource, client_for

pytestmark = pytest.mark.anyio


class ClientError(Exception):
    """Stands in for vLLM's ``VLLMClientError`` (its request-validation errors)."""


class DeadError(Exception):
    """Stands in for ``EngineDeadError``."""


class GracefulError(Exception):
    """Stands in for ``GracefulHTTPError`` (carries its HTTP status)."""

    def __init__(self, message: str, http_status: int) -> None:
        super().__init__(message)
        self.http_status = http_status


ERRORS = VLLMErrors((DeadError,), (ClientError,), (GracefulError,))


class FakeEngine:
    """Streams ``tokens`` deltas, then raises ``fail`` (or finishes); records aborts."""

    def __init__(self, tokens: int = 3, fail: BaseException | None = None) -> None:
        self.tokens, self.fail = tokens, fail
        self.started: list[str] = []
        self.aborted: list[str] = []
        cache = SimpleNamespace(num_gpu_blocks=10, block_size=16)
        self.vllm_config = SimpleNamespace(cache_config=cache)

    async def generate(self, prompt: Any, params: Any, rid: str) -> AsyncIterator[Any]:
        self.started.append(rid)
        for i in range(self.tokens):
            last = i == self.tokens - 1 and self.fail is None
            yield SimpleNamespace(
                prompt_token_ids=[1, 2], finished=last,
                outputs=[SimpleNamespace(token_ids=[i], text=f"t{i} ",
                                         finish_reason="length" if last else None)])
        if self.fail is not None:
            raise self.fail

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)

    def get_num_unfinished_requests(self) -> int:
        return 1  # the KV source only reports usage while the engine holds requests


@pytest.fixture(autouse=True)
def no_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the integration without vLLM: fake error classes, params and KV geometry."""
    monkeypatch.setattr(streaming, "vllm_errors", lambda: ERRORS)
    monkeypatch.setattr(streaming, "delta_params", lambda params: params)
    monkeypatch.setattr(streaming, "kv_bytes_per_token", lambda engine: 64)


async def drain(stream: AsyncIterator[str]) -> list[str]:
    return [text async for text in stream]


# -- A8: errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("tokens", [0, 2], ids=["before-first-token", "mid-stream"])
@pytest.mark.parametrize(("fail", "status", "reason"), [
    (ValueError("internal detail /srv/secret.py"), 500, "engine_error"),
    (TypeError("internal detail"), 500, "engine_error"),
    (RuntimeError("internal detail"), 500, "engine_error"),
    (ClientError("max_tokens must be at least 1\nmore"), 400, None),
    (DeadError("internal detail"), 503, None),
    (GracefulError("busy; try another instance", 503), 503, "engine_refused"),
])
async def test_errors_reach_the_client_by_kind_and_the_request_is_aborted(
        tokens: int, fail: Exception, status: int, reason: str | None,
        caplog: pytest.LogCaptureFixture) -> None:
    engine = FakeEngine(tokens, fail)
    vs = VLLMStreams(engine)
    stream = vs.stream("hi", "params", request_id="req-1")
    with pytest.raises(BackendError) as info:
        await drain(stream)
    error = info.value
    assert (error.status, error.reason) == (status, reason)
    assert "internal detail" not in error.message and "Traceback" not in error.message
    if status == 400:
        assert error.message == "max_tokens must be at least 1"  # vLLM's own words
    assert engine.aborted == ["req-1"]  # aborted on every unfinished path, even before a token
    assert (vs.errors_total, vs.errors_by_status) == (1, {status: 1})
    assert vs.aborted_total == 0 and vs.completed_total == 0  # an error, not an abort
    assert vs.inflight_ids() == ()
    logged = [r for r in caplog.records if "vLLM request req-1 failed" in r.getMessage()]
    assert len(logged) == (1 if reason == "engine_error" else 0)
    if logged:
        assert logged[0].exc_info is not None  # the traceback stays in the server log


async def test_finished_request_is_not_aborted_and_consumer_stop_is() -> None:
    engine = FakeEngine(3)
    vs = VLLMStreams(engine)
    assert await drain(vs.stream("hi", "params")) == ["t0 ", "t1 ", "t2 "]
    assert engine.aborted == [] and vs.completed_total == 1
    stream = vs.stream("hi", "params", request_id="stop-1")
    await anext(stream)
    await stream.aclose()
    assert engine.aborted == ["stop-1"] and vs.aborted_total == 1 and vs.errors_total == 0


# -- C3: KV-cache pressure refuses engine requests only --------------------------------------


def kv_guard(usage: float) -> tuple[Guard, VLLMGuard, FakeEngine]:
    guard = Guard(GuardConfig(sources=("process",), retry_after=9), sources=[FakeSource()])
    engine = FakeEngine(3)
    integration = VLLMGuard(engine, guard)
    integration.kv.kv_cache_usage = usage
    guard.sample_now()
    return guard, integration, engine


async def test_kv_pressure_refuses_new_engine_requests_only() -> None:
    guard, vg, engine = kv_guard(0.97)
    assert guard.policy.level.label == "normal"  # the app's level ignores the KV cache
    assert guard.admit() is None
    assert guard.status()["memory"]["sources"]["vllm_kv"]["advisory"] is True
    stream = vg.stream("hi", "params")
    with pytest.raises(BackendOverloadedError) as info:
        await anext(stream)
    error = info.value
    assert (error.status, error.reason, error.retry_after) == (503, "kv_cache_pressure", 9)
    assert error.headers() == {"retry-after": "9"}
    assert error.document() == {"error": "the model's KV cache is full; retry later",
                                "reason": "kv_cache_pressure", "retry_after": 9}
    assert engine.started == [] and engine.aborted == []  # never reached the engine
    status = guard.status()["vllm"]
    assert status["kv_level"] == "shed" and status["refused_by_reason"] == {
        "kv_cache_pressure": 1}
    assert guard.status()["actions"]["shed_by_reason"] == {}

    vg.kv.kv_cache_usage = 0.89  # inside the hysteresis band: still refusing
    await guard.tick()
    with pytest.raises(BackendOverloadedError):
        await anext(vg.stream("hi", "params"))
    vg.kv.kv_cache_usage = 0.5
    await guard.tick()
    assert await drain(vg.stream("hi", "params")) == ["t0 ", "t1 ", "t2 "]
    assert guard.status()["vllm"]["kv_level"] == "normal"


async def test_kv_pressure_over_http_is_a_503_for_the_engine_route_only() -> None:
    guard, vg, _ = kv_guard(0.99)
    api = FastAPI()

    @api.get("/chat")
    async def chat() -> Any:
        return sse_response(vg.stream("hi", "params"), wait_first=True)

    @api.get("/other")
    async def other() -> dict[str, str]:
        return {"ok": "yes"}

    async with client_for(GuardMiddleware(api, guard=guard)) as client:
        refused = await client.get("/chat")
        other_route = await client.get("/other")
        ready = await client.get("/llm-guard/ready")
        vg.kv.kv_cache_usage = 0.1
        await guard.tick()
        served = await client.get("/chat")
    assert refused.status_code == 503 and refused.headers["retry-after"] == "9"
    assert refused.json()["reason"] == "kv_cache_pressure"
    assert other_route.status_code == 200 and ready.status_code == 200
    assert served.status_code == 200 and "t0" in served.text
    assert guard.status()["sessions"]["shed_total"] == 0
