"""The send watch in process: a send the server never completes is found and abandoned."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import pytest

from llm_guard_sdk.asgi.http import HttpConnection
from llm_guard_sdk.asgi.websocket import WebSocketConnection
from llm_guard_sdk.errors import PeerGoneError
from llm_guard_sdk.session import CloseReason
from tests.support import make_guard, until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("hot_path")]


async def never_receive() -> dict[str, Any]:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


class FrozenSend:
    """A server ``send`` that blocks once ``freeze`` is set, as uvicorn's does on a full buffer."""

    def __init__(self) -> None:
        self.frozen = False
        self.sent: list[dict[str, Any]] = []
        self.blocked = 0

    async def __call__(self, message: dict[str, Any]) -> None:
        if self.frozen:
            self.blocked += 1
            await asyncio.Event().wait()
        self.sent.append(message)


async def test_a_stuck_websocket_send_is_detected_closed_and_abandoned() -> None:
    guard = make_guard(send_timeout=0.2)
    session = guard.registry.open("websocket", "/ws")
    server = FrozenSend()
    conn = WebSocketConnection(guard, session, never_receive, server)
    await conn.send({"type": "websocket.accept"})
    server.frozen = True
    app = asyncio.create_task(conn.send({"type": "websocket.send", "text": "x" * 10}))
    await until(lambda: server.blocked == 1)

    async def checked() -> bool:
        await guard.dead_peers.run()
        return session.closed

    deadline = asyncio.get_running_loop().time() + 30
    while not await checked():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    with pytest.raises(PeerGoneError):
        await asyncio.wait_for(app, 10)
    assert session.close_reason is CloseReason.SEND_TIMEOUT
    assert guard.status()["sessions"]["send_timeout_total"] == 1
    assert [m["type"] for m in server.sent] == ["websocket.accept"]  # no close frame sent
    assert (await asyncio.wait_for(conn.receive(), 5))["code"] == 1006
    await conn.finish()


async def test_a_stuck_http_send_is_abandoned_after_close_grace_and_app_told() -> None:
    guard = make_guard(send_timeout=5, close_grace=0)
    session = guard.registry.open("http", "/sse")
    server = FrozenSend()
    conn = HttpConnection(guard, session, never_receive, server)
    assert len(guard.dead_peers) == 1
    await conn.send({"type": "http.response.start", "status": 200, "headers": []})
    server.frozen = True
    app = asyncio.create_task(conn.send({"type": "http.response.body", "body": b"x",
                                         "more_body": True}))
    await until(lambda: server.blocked == 1)
    assert conn.stalled_for(0.0) == 0.0 and conn.stalled_for(7.0) == 7.0  # same send: stuck
    await guard.close_session(session, CloseReason.SEND_TIMEOUT)
    assert (await asyncio.wait_for(conn.receive(), 5))["type"] == "http.disconnect"
    # A body chunk has no frame of ours around the server's send: the stuck send is cancelled.
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(app, 10)
    assert app.cancelled()
    await conn.send({"type": "http.response.body", "body": b"", "more_body": False})
    assert len(server.sent) == 1 and server.blocked == 1  # nothing more reaches the server
    await conn.finish()
    assert len(guard.dead_peers) == 0


async def test_someone_elses_cancel_stays_a_cancel() -> None:
    guard = make_guard(send_timeout=5, close_grace=0)
    session = guard.registry.open("websocket", "/ws")
    server = FrozenSend()
    server.frozen = True
    conn = WebSocketConnection(guard, session, never_receive, server)
    app = asyncio.create_task(conn.send({"type": "websocket.send", "text": "x"}))
    await until(lambda: server.blocked == 1)
    app.cancel()  # e.g. an anyio cancel scope, at the same time as the guard's
    conn.abandon_send()
    with pytest.raises(asyncio.CancelledError):
        await app
    await conn.finish()


def test_send_timeout_off_watches_nothing() -> None:
    guard = make_guard(send_timeout=0)
    assert guard.config.send_timeout is None
    session = guard.registry.open("http", "/")
    HttpConnection(guard, session, never_receive, FrozenSend())
    assert len(guard.dead_peers) == 0


@pytest.mark.parametrize("raised", [PeerGoneError("abandoned"), RuntimeError("app bug")])
async def test_a_peer_gone_error_the_app_lets_through_ends_at_the_guard(
        raised: Exception) -> None:
    """E.g. Starlette's BaseHTTPMiddleware re-raises it; uvicorn must not log it as a crash.

    Only the guard's own PeerGoneError is absorbed; an app's exception still propagates.
    """
    from llm_guard_sdk import GuardMiddleware
    from tests.support import http_scope

    guard = make_guard(send_timeout=5)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise raised

    sent: list[dict[str, Any]] = []

    async def server_send(message: dict[str, Any]) -> None:
        sent.append(message)

    call = GuardMiddleware(app, guard=guard)(http_scope("/sse"), never_receive, server_send)
    if isinstance(raised, PeerGoneError):
        await asyncio.wait_for(call, 10)
    else:
        with pytest.raises(RuntimeError, match="app bug"):
            await asyncio.wait_for(call, 10)
    assert len(guard.registry) == 0 and guard.status()["errors"]["internal_total"] == 0


async def test_a_dead_peer_under_the_middleware_ends_the_request_quietly() -> None:
    """An app that ignores the disconnect, stuck in a body send: cancelled, then absorbed.

    The app sees a cancel at its send (it can clean up in ``finally``), the middleware
    returns normally with the session closed as ``send_timeout``, nothing else is sent.
    """
    from llm_guard_sdk import GuardMiddleware
    from tests.support import http_scope

    guard = make_guard(send_timeout=0.2, close_grace=0)
    server = FrozenSend()
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        server.frozen = True
        try:
            while True:
                await send({"type": "http.response.body", "body": b"x", "more_body": True})
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        finally:
            seen.append("finally")

    call = asyncio.create_task(
        GuardMiddleware(app, guard=guard)(http_scope("/sse"), never_receive, server))
    await until(lambda: server.blocked == 1)
    deadline = asyncio.get_running_loop().time() + 30
    while not call.done():
        assert asyncio.get_running_loop().time() < deadline
        await guard.dead_peers.run()
        await asyncio.sleep(0.05)
    assert call.result() is None  # returned normally: no exception reaches the server
    assert seen == ["cancelled", "finally"]
    assert guard.status()["sessions"]["send_timeout_total"] == 1
    assert len(guard.registry) == 0 and guard.status()["errors"]["internal_total"] == 0
    assert [m["type"] for m in server.sent] == ["http.response.start"]


async def test_a_cancel_from_elsewhere_during_a_body_send_still_propagates() -> None:
    """Only the guard's own cancel is absorbed: a server's cancel of the request stays one."""
    from llm_guard_sdk import GuardMiddleware
    from tests.support import http_scope

    guard = make_guard(send_timeout=5, close_grace=0)
    server = FrozenSend()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        server.frozen = True
        await send({"type": "http.response.body", "body": b"x", "more_body": True})

    call = asyncio.create_task(
        GuardMiddleware(app, guard=guard)(http_scope("/sse"), never_receive, server))
    await until(lambda: server.blocked == 1)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert len(guard.registry) == 0


class StepSend:
    """A server ``send`` that completes each message only when the test lets it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.blocked = 0

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        self.blocked += 1
        await self.release.wait()
        self.release.clear()


async def test_each_new_send_restarts_the_stall_count_whatever_its_kind() -> None:
    """Slow sends that each complete are no dead peer: a send is known by its number."""
    guard = make_guard(send_timeout=5, close_grace=0)
    session = guard.registry.open("http", "/sse")
    server = StepSend()
    conn = HttpConnection(guard, session, never_receive, server)
    assert conn.stalled_for(0.0) == 0.0  # not sending
    messages = [{"type": "http.response.start", "status": 200, "headers": []},
                *({"type": "http.response.body", "body": b"x", "more_body": True}
                  for _ in range(2))]
    for number, message in enumerate(messages, 1):
        app = asyncio.create_task(conn.send(message))
        await until(lambda n=number: server.blocked == n)  # type: ignore[misc]
        assert conn.stalled_for(10.0 * number) == 0.0  # a new send: first seen now
        assert conn.stalled_for(10.0 * number + 3) == 3.0  # the same send, still stuck
        server.release.set()
        await asyncio.wait_for(app, 10)
        assert conn.stalled_for(100.0) == 0.0  # done: not sending
    assert not session.closed
    await conn.finish()
