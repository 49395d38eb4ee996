"""In-process ASGI tests of GuardMiddleware (httpx ASGITransport, asgiref communicator)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from llm_guard_sdk import (
    CloseReason,
    Guard,
    GuardConfig,
    GuardMiddleware,
    Level,
    current_session,
    guard_stream,
)
from tests.support import FakeSource, client_for
from tests.support import http_scope as asgi_http_scope

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("hot_path")]


def make_guard(**overrides: Any) -> tuple[Guard, FakeSource]:
    fake = FakeSource(used=0, limit=1000)
    return Guard(GuardConfig.defaults(sources=("process",), **overrides), sources=[fake]), fake


class Probe:
    """A model stand-in whose generator reports whether it started and was closed."""

    def __init__(self) -> None:
        self.started = 0
        self.closed = 0
        self.release = asyncio.Event()
        self.generators: list[Any] = []

    @property
    def all_closed(self) -> bool:
        """Every generator is finished (frame released), started or not."""
        return all(agen.ag_frame is None for agen in self.generators)

    async def tokens(self, n: int = 3, *, wait: bool = False) -> AsyncIterator[str]:
        self.started += 1
        try:
            if wait:
                await self.release.wait()
            for i in range(n):
                yield f"t{i} "
        finally:
            self.closed += 1


def starlette_app(probe: Probe, *, wait: bool = False) -> Starlette:
    async def plain(request: Any) -> PlainTextResponse:
        session = current_session()
        return PlainTextResponse("hello" if session is not None else "no-session")

    async def stream(request: Any) -> StreamingResponse:
        agen = probe.tokens(wait=wait)
        probe.generators.append(agen)
        return StreamingResponse(guard_stream(agen), media_type="text/plain")

    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            while True:
                text = await websocket.receive_text()
                async for token in guard_stream(probe.tokens(2)):
                    await websocket.send_text(token + text)
        except WebSocketDisconnect:
            pass

    return Starlette(routes=[Route("/plain", plain), Route("/stream", stream),
                             WebSocketRoute("/ws", ws)])


#: These tests speak ASGI spec 2.3 unless they say otherwise.
http_scope = partial(asgi_http_scope, spec_version="2.3")


async def test_lifespan_passes_through_and_runs_sampler() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "lifespan"
        while True:
            message = await receive()
            seen.append(message["type"])
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return

    guard, _ = make_guard()
    comm = ApplicationCommunicator(GuardMiddleware(app, guard=guard), {"type": "lifespan"})
    await comm.send_input({"type": "lifespan.startup"})
    assert await comm.receive_output(2) == {"type": "lifespan.startup.complete"}
    assert guard._task is not None and not guard._task.done()
    await comm.send_input({"type": "lifespan.shutdown"})
    assert await comm.receive_output(2) == {"type": "lifespan.shutdown.complete"}
    await comm.wait(2)
    assert seen == ["lifespan.startup", "lifespan.shutdown"]
    assert guard._task is None


async def test_unknown_scope_passes_through_untouched() -> None:
    calls: list[tuple[Any, Any, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        calls.append((scope, receive, send))

    async def receive() -> dict[str, Any]:
        return {}

    async def send(message: Any) -> None:
        return None

    scope = {"type": "custom.protocol", "x": 1}
    guard, _ = make_guard()
    await GuardMiddleware(app, guard=guard)(scope, receive, send)
    assert calls == [(scope, receive, send)]
    assert guard.registry.counters.opened_total == 0


async def test_plain_request_is_untouched_but_counted() -> None:
    guard, _ = make_guard()
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        response = await client.get("/plain")
    assert response.status_code == 200
    assert response.text == "hello"
    assert response.headers["x-llm-guard-session"].startswith("sess-")
    status = guard.status()
    assert status["sessions"]["opened_total"] == 1
    assert status["sessions"]["closed_total"] == 1
    assert status["sessions"]["active"] == 0


async def test_session_ids_are_unique_and_unguessable() -> None:
    guard, _ = make_guard()
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        ids = {(await client.get("/plain")).headers["x-llm-guard-session"] for _ in range(50)}
    assert len(ids) == 50
    assert all(len(i) >= len("sess-") + 22 for i in ids)


async def test_stream_completes_and_generator_closed_once() -> None:
    probe = Probe()
    guard, _ = make_guard()
    async with client_for(GuardMiddleware(starlette_app(probe), guard=guard)) as client:
        response = await client.get("/stream")
    assert response.text == "t0 t1 t2 "
    assert (probe.started, probe.closed) == (1, 1)
    assert guard.status()["streams"]["completed_total"] == 1


@pytest.mark.parametrize("token", [None, "s3cret-token-value"])
async def test_status_allows_loopback_or_token(token: str | None) -> None:
    guard, _ = make_guard(status_token=token)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        response = await client.get("/llm-guard/status", headers=headers)
    assert response.status_code == 200
    doc = response.json()
    assert set(doc) >= {"level", "memory", "sessions", "streams", "thresholds"}
    assert set(doc["memory"]) >= {"rss_bytes", "limit_bytes", "used_ratio", "source"}
    assert set(doc["sessions"]) >= {"active", "idle", "opened_total", "closed_total",
                                    "evicted_total", "shed_total"}
    assert set(doc["streams"]) >= {"open", "completed_total", "aborted_total",
                                   "disconnected_total"}
    assert doc["thresholds"]["warn"] == 0.75


async def test_status_refuses_remote_clients_without_token() -> None:
    guard, _ = make_guard()
    app = GuardMiddleware(starlette_app(Probe()), guard=guard)
    async with client_for(app, client=("10.1.2.3", 4000)) as client:
        response = await client.get("/llm-guard/status")
    assert response.status_code == 403
    assert "LLM_GUARD_STATUS_TOKEN" in response.json()["error"]


@pytest.mark.parametrize("header", [
    None, "Bearer wrong-token-value", "Bearer", "Bearer ", "Basic czNjcmV0", "bearer",
    "Bearer s3cret-token-valueX", "s3cret-token-value",
])
async def test_status_rejects_bad_credentials_with_401(header: str | None) -> None:
    guard, _ = make_guard(status_token="s3cret-token-value")
    headers = {"authorization": header} if header is not None else {}
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        response = await client.get("/llm-guard/status", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_status_rejects_non_ascii_authorization_with_401() -> None:
    guard, _ = make_guard(status_token="s3cret-token-value")
    app = GuardMiddleware(starlette_app(Probe()), guard=guard)
    comm = ApplicationCommunicator(app, http_scope(
        "/llm-guard/status", headers=[(b"authorization", b"Bearer \xff\xfe\x00\x01")]))
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    start = await comm.receive_output(2)
    assert start["status"] == 401


async def test_status_method_and_unknown_endpoint() -> None:
    guard, _ = make_guard()
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        assert (await client.post("/llm-guard/status")).status_code == 405
        missing = await client.get("/llm-guard/nope")
    assert missing.status_code == 404
    assert "/status" in missing.json()["endpoints"]


async def test_status_lists_sessions_without_content() -> None:
    probe = Probe()
    guard, _ = make_guard()
    app = GuardMiddleware(starlette_app(probe, wait=True), guard=guard)
    comm = ApplicationCommunicator(app, http_scope("/stream"))
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    await comm.receive_output(2)  # response start
    async with client_for(app) as client:
        doc = (await client.get("/llm-guard/status?sessions=1")).json()
    assert len(doc["session_list"]) == 1
    entry = doc["session_list"][0]
    assert entry["streams"] == 1 and entry["kind"] == "http"
    probe.release.set()
    await comm.wait(2)


async def test_disconnect_before_first_chunk_closes_generator() -> None:
    """The model has not produced a token yet when the client leaves (sse-starlette#156)."""
    probe = Probe()
    guard, _ = make_guard()
    comm = ApplicationCommunicator(GuardMiddleware(starlette_app(probe, wait=True), guard=guard),
                                   http_scope("/stream"))
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(2)
    assert len(probe.generators) == 1
    assert probe.all_closed, "the generator must be closed even if it never started"
    assert probe.closed == probe.started  # a started body ran its finally
    status = guard.status()
    assert status["streams"]["disconnected_total"] == 1
    assert status["streams"]["open"] == 0
    assert status["sessions"]["active"] == 0


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
async def test_disconnect_mid_stream_stops_waiting_generator(spec_version: str) -> None:
    """Under spec 2.4 Starlette does not listen for disconnects; the guard must."""
    probe = Probe()
    guard, _ = make_guard()

    async def stuck() -> AsyncIterator[bytes]:
        probe.started += 1
        try:
            yield b"first"
            await asyncio.Event().wait()  # the model never answers again
            yield b"never"
        finally:
            probe.closed += 1

    async def endpoint(request: Any) -> StreamingResponse:
        return StreamingResponse(guard_stream(stuck()))

    app = GuardMiddleware(Starlette(routes=[Route("/s", endpoint)]), guard=guard)
    scope = http_scope("/s", asgi={"version": "3.0", "spec_version": spec_version})
    comm = ApplicationCommunicator(app, scope)
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    assert (await comm.receive_output(2))["type"] == "http.response.start"
    assert (await comm.receive_output(2))["body"] == b"first"
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(2)
    assert probe.closed == 1
    assert guard.status()["streams"]["disconnected_total"] == 1


async def test_shed_http_returns_503_with_retry_after() -> None:
    guard, fake = make_guard(retry_after=7)
    fake.used = 950
    guard.sample_now()
    assert guard.policy.level is Level.SHED
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        response = await client.get("/plain")
        status = await client.get("/llm-guard/status")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "7"
    assert response.json() == {"error": "overloaded", "reason": "memory_pressure",
                               "retry_after": 7}
    assert status.status_code == 200, "status must stay reachable while shedding"
    assert status.json()["sessions"]["shed_total"] == 1
    fake.used = 100
    guard.sample_now()
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        assert (await client.get("/plain")).status_code == 200


async def test_max_sessions_sheds() -> None:
    probe = Probe()
    guard, _ = make_guard(max_sessions=1)
    app = GuardMiddleware(starlette_app(probe, wait=True), guard=guard)
    comm = ApplicationCommunicator(app, http_scope("/stream"))
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    await comm.receive_output(2)
    async with client_for(app) as client:
        response = await client.get("/plain")
    assert response.status_code == 503
    assert response.json()["reason"] == "max_sessions"
    probe.release.set()
    await comm.wait(2)


@pytest.mark.parametrize("with_extension", [True, False])
async def test_shed_websocket(with_extension: bool) -> None:
    guard, fake = make_guard()
    fake.used = 999
    guard.sample_now()
    scope = {"type": "websocket", "path": "/ws", "headers": [], "client": ("127.0.0.1", 1),
             "subprotocols": [],
             "extensions": {"websocket.http.response": {}} if with_extension else {}}
    comm = ApplicationCommunicator(GuardMiddleware(starlette_app(Probe()), guard=guard), scope)
    await comm.send_input({"type": "websocket.connect"})
    first = await comm.receive_output(2)
    if with_extension:
        assert first["type"] == "websocket.http.response.start"
        assert first["status"] == 503
        assert (b"retry-after", b"5") in first["headers"]
        body = await comm.receive_output(2)
        assert json.loads(body["body"])["reason"] == "memory_pressure"
    else:
        assert first == {"type": "websocket.accept"}
        close = await comm.receive_output(2)
        assert close["type"] == "websocket.close" and close["code"] == 1013
    await comm.wait(2)


async def test_websocket_eviction_closes_with_code_and_reason() -> None:
    probe = Probe()
    guard, _ = make_guard()
    scope = {"type": "websocket", "path": "/ws", "headers": [], "client": ("127.0.0.1", 1),
             "subprotocols": []}
    comm = ApplicationCommunicator(GuardMiddleware(starlette_app(probe), guard=guard), scope)
    await comm.send_input({"type": "websocket.connect"})
    assert (await comm.receive_output(2))["type"] == "websocket.accept"
    await comm.send_input({"type": "websocket.receive", "text": "!"})
    frames = [await comm.receive_output(2) for _ in range(2)]
    assert [f["text"] for f in frames] == ["t0 !", "t1 !"]
    (session,) = list(guard.registry)
    assert session.state.value == "idle"
    await guard.close_session(session, CloseReason.EVICTED)
    close = await comm.receive_output(2)
    assert close["type"] == "websocket.close"
    assert close["code"] == 1013
    assert "evicted" in close["reason"]
    await comm.wait(2)
    assert guard.status()["sessions"]["evicted_total"] == 1
    assert len(guard.registry) == 0


async def test_internal_error_is_counted_and_request_proceeds(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    guard, _ = make_guard()

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("guard bug")

    monkeypatch.setattr(guard.registry, "open", broken)
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        response = await client.get("/plain")
    assert response.status_code == 200
    assert response.text == "no-session"
    assert guard.status()["errors"]["internal_total"] == 1
    assert "continuing unguarded" in caplog.text


@pytest.mark.parametrize("value", [b"x" * 500, b"abc\x00def", b"ab\ncd", "é".encode()])
async def test_hostile_request_id_is_ignored(value: bytes) -> None:
    guard, _ = make_guard()
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        session = current_session()
        seen.append(session.label if session else "none")
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    comm = ApplicationCommunicator(GuardMiddleware(app, guard=guard),
                                   http_scope("/", headers=[(b"x-request-id", value)]))
    await comm.send_input({"type": "http.request", "body": b""})
    assert (await comm.receive_output(2))["status"] == 204
    await comm.wait(2)
    assert seen == [None]


async def test_valid_request_id_becomes_label() -> None:
    guard, _ = make_guard()
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        session = current_session()
        seen.append(session.label if session else None)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    comm = ApplicationCommunicator(GuardMiddleware(app, guard=guard),
                                   http_scope("/", headers=[(b"x-request-id", b"req-42")]))
    await comm.send_input({"type": "http.request", "body": b""})
    await comm.receive_output(2)
    await comm.wait(2)
    assert seen == ["req-42"]


async def test_app_exception_propagates_unchanged_and_session_closed() -> None:
    guard, _ = make_guard()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise KeyError("app bug")

    with pytest.raises(KeyError, match="app bug"):
        await GuardMiddleware(app, guard=guard)(http_scope("/"), _never, _discard)
    assert len(guard.registry) == 0
    assert guard.status()["sessions"]["closed_total"] == 1


async def test_request_body_reaches_app_intact() -> None:
    guard, _ = make_guard()

    async def echo(request: Any) -> PlainTextResponse:
        return PlainTextResponse((await request.body()).decode())

    app = GuardMiddleware(Starlette(routes=[Route("/e", echo, methods=["POST"])]), guard=guard)
    async with client_for(app) as client:
        response = await client.post("/e", content=b"x" * 100_000)
    assert response.text == "x" * 100_000
    (snapshot,) = [guard.status()["sessions"]]
    assert snapshot["closed_total"] == 1


async def _never() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError


async def _discard(message: Any) -> None:
    return None


async def test_exempt_paths_bypass_guard_and_shedding() -> None:
    guard, fake = make_guard(exempt_paths=("/plain",))
    fake.used = 999
    guard.sample_now()
    async with client_for(GuardMiddleware(starlette_app(Probe()), guard=guard)) as client:
        exempt = await client.get("/plain")
        guarded = await client.get("/stream")
    assert exempt.status_code == 200 and exempt.text == "no-session"
    assert "x-llm-guard-session" not in exempt.headers
    assert guarded.status_code == 503
    assert guard.registry.counters.opened_total == 0


async def test_receive_keeps_returning_disconnect() -> None:
    guard, _ = make_guard()
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        for _ in range(3):
            seen.append((await asyncio.wait_for(receive(), 2))["type"])

    comm = ApplicationCommunicator(GuardMiddleware(app, guard=guard), http_scope("/"))
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    await comm.send_input({"type": "http.disconnect"})
    await comm.wait(3)
    assert seen == ["http.request", "http.disconnect", "http.disconnect"]
