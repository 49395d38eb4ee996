"""The figures follow the guard: level, evictions, sheds by protocol, streams, histograms."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator

from llm_guard_sdk import GuardMiddleware
from llm_guard_sdk.session import CloseReason
from llm_guard_sdk.stream import guard_stream
from tests.metrics.support import metrics_guard, scrape, value
from tests.support import FakeSource
from tests.support.asgi import client_for
from tests.support.guard import FakeStream, idle

pytestmark = pytest.mark.anyio


async def plain_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """200 for HTTP; a WebSocket accepted and held until the client leaves."""
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
    elif scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        while (await receive())["type"] != "websocket.disconnect":
            pass


async def test_level_and_pressure_follow_the_source() -> None:
    source = FakeSource(100, 1000, "fake")
    guard, metrics = metrics_guard(source)
    samples = scrape(guard, metrics)
    assert value(samples, "llm_guard_level") == 0
    assert value(samples, "llm_guard_memory_pressure_ratio", source="fake") == pytest.approx(0.1)
    assert value(samples, "llm_guard_memory_used_bytes", source="fake") == 100
    assert value(samples, "llm_guard_memory_limit_bytes", source="fake") == 1000
    for used, level in ((800, 1), (900, 2), (960, 3), (100, 0)):
        source.used = used
        guard.sample_now()
        samples = scrape(guard, metrics)
        assert value(samples, "llm_guard_level") == level
        assert value(samples, "llm_guard_memory_pressure_ratio",
                     source="fake") == pytest.approx(used / 1000)


async def test_a_stale_source_loses_its_series() -> None:
    source = FakeSource(100, 1000, "fake")
    guard, metrics = metrics_guard(source)
    assert value(scrape(guard, metrics), "llm_guard_memory_used_bytes", source="fake") == 100
    source.read = lambda: (_ for _ in ()).throw(OSError("gone"))  # type: ignore[method-assign]
    for _ in range(3):
        guard.sample_now()
    assert value(scrape(guard, metrics), "llm_guard_memory_used_bytes", source="fake") is None


async def test_evictions_and_closes_are_counted_by_reason() -> None:
    guard, metrics = metrics_guard()
    sessions = [idle(guard, 10) for _ in range(3)]
    samples = scrape(guard, metrics)
    assert value(samples, "llm_guard_sessions", state="idle") == 3
    assert value(samples, "llm_guard_sessions_opened_total") == 3
    await guard.close_session(sessions[0], CloseReason.EVICTED)
    await guard.close_session(sessions[1], CloseReason.IDLE_TIMEOUT)
    await guard.close_session(sessions[2], CloseReason.DISCONNECTED)
    samples = scrape(guard, metrics)
    assert value(samples, "llm_guard_evictions_total", reason="evicted") == 1
    assert value(samples, "llm_guard_evictions_total", reason="idle_timeout") == 1
    assert value(samples, "llm_guard_evictions_total", reason="disconnected") is None
    assert value(samples, "llm_guard_sessions_closed_total", reason="disconnected") == 1
    assert value(samples, "llm_guard_sessions", state="idle") == 0
    scrape(guard, metrics)  # a tick without change adds nothing
    assert value(scrape(guard, metrics), "llm_guard_evictions_total", reason="evicted") == 1


async def test_sheds_are_counted_by_protocol_and_reason() -> None:
    source = FakeSource(990, 1000, "fake")
    guard, metrics = metrics_guard(source)
    guard.sample_now()
    app = GuardMiddleware(plain_app, guard=guard)
    async with client_for(app) as client:
        assert (await client.get("/chat")).status_code == 503
        assert (await client.get("/chat")).status_code == 503
    scope = {"type": "websocket", "path": "/ws", "headers": [], "client": ("127.0.0.1", 1),
             "subprotocols": []}
    comm = ApplicationCommunicator(app, scope)
    await comm.send_input({"type": "websocket.connect"})
    assert (await comm.receive_output(2))["type"] == "websocket.accept"
    assert (await comm.receive_output(2))["code"] == 1013
    await comm.wait(2)
    samples = scrape(guard, metrics)
    assert value(samples, "llm_guard_shed_total", protocol="http",
                 reason="memory_pressure") == 2
    assert value(samples, "llm_guard_shed_total", protocol="websocket",
                 reason="memory_pressure") == 1


async def test_streams_are_counted_by_outcome() -> None:
    guard, metrics = metrics_guard()

    async def chunks(n: int) -> AsyncIterator[bytes]:
        for _ in range(n):
            yield b"x"

    done = guard.registry.open("http", "/chat")
    assert [c async for c in guard_stream(chunks(3), session=done)] == [b"x"] * 3
    cut = guard.registry.open("http", "/chat")
    stream = guard_stream(chunks(3), session=cut)
    assert await stream.__anext__() == b"x"
    samples = scrape(guard, metrics)
    assert value(samples, "llm_guard_streams_open") == 1
    await guard.close_session(cut, CloseReason.TIMEOUT)
    await stream.aclose()
    samples = scrape(guard, metrics)
    assert value(samples, "llm_guard_streams_total", outcome="completed") == 1
    assert value(samples, "llm_guard_streams_total", outcome="timeout") == 1
    assert value(samples, "llm_guard_streams_open") == 0


async def test_latency_histograms_and_status_come_from_the_tick() -> None:
    guard, metrics = metrics_guard()
    assert guard.status()["latency"] == {"first_token_p99_seconds": None,
                                         "inter_chunk_p99_seconds": None, "samples": 0}
    session = guard.registry.open("http", "/chat")
    stream = FakeStream("s")
    stream.started_at = time.monotonic() - 0.5
    session.add_stream(stream)
    await guard.timeouts.run()  # seen, no chunk yet
    stream.chunks = 4
    await guard.timeouts.run()  # a first token and three gaps
    samples = scrape(guard, metrics)
    assert value(samples, "llm_guard_time_to_first_token_seconds_count") == 1
    assert value(samples, "llm_guard_inter_chunk_seconds_count") == 3
    assert value(samples, "llm_guard_time_to_first_token_seconds_bucket", le="+Inf") == 1
    assert value(samples, "llm_guard_time_to_first_token_seconds_sum") >= 0.5  # type: ignore[operator]
    latency = guard.status()["latency"]
    assert latency["samples"] == 4
    assert latency["first_token_p99_seconds"] >= 0.49
    assert latency["inter_chunk_p99_seconds"] is not None
    assert guard.status()["worker"]["pid"] > 0


async def test_held_bytes_histogram_observes_each_session_peak_at_close() -> None:
    guard, metrics = metrics_guard()
    session = idle(guard, 0)
    session.attached_bytes = 50_000
    guard.registry.resize(session)  # noted at the power-of-two change
    session.attached_bytes = 10
    guard.registry.resize(session)
    await guard.close_session(session, CloseReason.COMPLETED)
    samples = scrape(guard, metrics)
    assert value(samples, "llm_guard_session_held_bytes_count") == 1
    assert value(samples, "llm_guard_session_held_bytes_sum") == 50_000
    assert value(samples, "llm_guard_session_held_bytes_bucket", le="16384.0") == 0
    assert value(samples, "llm_guard_session_held_bytes_bucket", le="65536.0") == 1


async def test_internal_errors_are_counted() -> None:
    guard, metrics = metrics_guard()
    guard.record_internal_error("test")
    assert value(scrape(guard, metrics), "llm_guard_internal_errors_total") == 1
