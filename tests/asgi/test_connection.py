"""The receive pump in process: concurrent readers, the read-ahead bound, the WebSocket bound."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware, current_session, guard_stream
from llm_guard_sdk.session import Session
from tests.support import FakeSource, SendRecorder, http_scope, until, ws_scope

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("hot_path")]

CHUNK = 1000


def make_guard(**overrides: Any) -> Guard:
    return Guard(GuardConfig.defaults(sources=("process",), **overrides),
                 sources=[FakeSource(used=0, limit=1000)])


class Upload:
    """A server ``receive`` for a request body of ``chunks`` parts; counts how often it is read."""

    def __init__(self, chunks: int) -> None:
        self.chunks = chunks
        self.reads = 0
        self.leave = asyncio.Event()

    async def __call__(self) -> dict[str, Any]:
        self.reads += 1
        if self.reads <= self.chunks:
            return {"type": "http.request", "body": bytes([self.reads]) * CHUNK,
                    "more_body": self.reads < self.chunks}
        await self.leave.wait()
        return {"type": "http.disconnect"}


async def settle() -> None:
    """Let every ready task run many times over (the fake server answers without waiting)."""
    for _ in range(200):
        await asyncio.sleep(0)


async def test_concurrent_receivers_each_get_the_next_message() -> None:
    guard = make_guard()
    got: list[list[bytes]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async def reader() -> bytes:
            return bytes((await receive())["body"])

        got.append(list(await asyncio.gather(*(reader() for _ in range(10)))))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    comm = ApplicationCommunicator(GuardMiddleware(app, guard=guard), http_scope("/"))
    for i in range(10):
        await comm.send_input({"type": "http.request", "body": b"%d" % i, "more_body": i < 9})
    assert (await comm.receive_output(10))["status"] == 204
    await comm.wait(10)
    assert got == [[b"%d" % i for i in range(10)]]


async def test_is_disconnected_poll_beside_listen_for_disconnect_sees_the_disconnect() -> None:
    """Starlette's StreamingResponse (spec 2.3) listens while the generator polls: two readers."""
    guard = make_guard()
    closed = asyncio.Event()

    async def endpoint(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            try:
                await request.is_disconnected()
                while True:
                    yield b"chunk"
                    await asyncio.sleep(0.01)
            finally:
                closed.set()

        return StreamingResponse(body())

    app = GuardMiddleware(Starlette(routes=[Route("/s", endpoint)]), guard=guard)
    comm = ApplicationCommunicator(app, http_scope("/s", spec_version="2.3"))
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    assert (await comm.receive_output(10))["type"] == "http.response.start"
    assert (await comm.receive_output(10))["body"] == b"chunk"
    await comm.send_input({"type": "http.disconnect"})
    await asyncio.wait_for(closed.wait(), 10)
    await comm.wait(10)
    assert guard.status()["sessions"]["active"] == 0


async def test_pump_reads_one_message_ahead_of_the_app_while_the_body_arrives() -> None:
    guard = make_guard()
    upload = Upload(chunks=10)
    sessions: list[Session] = []
    read_more = asyncio.Event()
    received: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        session = current_session()
        assert session is not None
        sessions.append(session)
        received.append((await receive())["body"])
        await read_more.wait()  # busy (e.g. streaming) without reading
        while True:
            message = await receive()
            received.append(message["body"])
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    task = asyncio.create_task(GuardMiddleware(app, guard=guard)(
        http_scope("/upload", method="POST"), upload, SendRecorder()))
    await until(lambda: upload.reads == 2)
    await settle()
    (session,) = sessions
    assert upload.reads == 2, "the pump read more than one message ahead"
    assert (session.chunks_in, session.bytes_in) == (2, 2 * CHUNK)
    assert session.buffered_bytes == CHUNK, "the message read ahead is accounted"
    read_more.set()
    await asyncio.wait_for(task, 10)
    assert received == [bytes([i]) * CHUNK for i in range(1, 11)], "intact and in order"
    assert session.buffered_bytes == 0


async def test_after_the_body_the_pump_sees_a_disconnect_while_the_app_is_busy() -> None:
    """``more_body`` false: only a disconnect can follow, so the pump reads on."""
    guard = make_guard()
    upload = Upload(chunks=1)
    stopped = asyncio.Event()

    async def tokens() -> AsyncIterator[str]:
        try:
            yield "t"
            await asyncio.Event().wait()  # the model never answers again
            yield "never"
        finally:
            stopped.set()

    async def app(scope: Any, receive: Any, send: Any) -> None:  # never reads the body
        await send({"type": "http.response.start", "status": 200, "headers": []})
        async for token in guard_stream(tokens()):
            await send({"type": "http.response.body", "body": token.encode(), "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    task = asyncio.create_task(GuardMiddleware(app, guard=guard)(
        http_scope("/s"), upload, SendRecorder()))
    await until(lambda: upload.reads == 2)  # the body, then waiting for the disconnect
    upload.leave.set()
    await asyncio.wait_for(stopped.wait(), 10)
    await asyncio.wait_for(task, 10)
    assert guard.status()["streams"]["disconnected_total"] == 1


async def ws_app_that_does_not_read(release: asyncio.Event, seen: list[dict[str, Any]]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await release.wait()
        while True:
            message = await receive()
            seen.append(message)
            if message["type"] == "websocket.disconnect":
                return

    return app


async def test_websocket_frames_the_app_does_not_read_past_the_bound_close_1009() -> None:
    guard = make_guard(max_inbound_buffer=4 * CHUNK)
    release = asyncio.Event()
    seen: list[dict[str, Any]] = []
    app = GuardMiddleware(await ws_app_that_does_not_read(release, seen), guard=guard)
    comm = ApplicationCommunicator(app, ws_scope("/ws"))
    await comm.send_input({"type": "websocket.connect"})
    assert (await comm.receive_output(10))["type"] == "websocket.accept"
    (session,) = list(guard.registry)
    for _ in range(4):
        await comm.send_input({"type": "websocket.receive", "bytes": b"x" * CHUNK})
    await until(lambda: session.buffered_bytes == 4 * CHUNK)
    assert not session.closed, "at the bound, nothing happens yet"
    await comm.send_input({"type": "websocket.receive", "bytes": b"x"})
    close = await comm.receive_output(10)
    assert close["type"] == "websocket.close"
    assert close["code"] == 1009
    assert guard.status()["sessions"]["inbound_overflow_total"] == 1
    assert session.buffered_bytes == 0, "the unread frames were dropped"
    release.set()
    await comm.wait(10)
    assert [m["type"] for m in seen] == ["websocket.disconnect"]
    assert seen[0]["code"] == 1009
    assert guard.status()["sessions"]["active"] == 0


async def test_websocket_app_that_reads_is_never_cut_and_one_big_frame_is_accepted() -> None:
    guard = make_guard(max_inbound_buffer=4 * CHUNK)
    release = asyncio.Event()
    seen: list[dict[str, Any]] = []
    app = GuardMiddleware(await ws_app_that_does_not_read(release, seen), guard=guard)
    comm = ApplicationCommunicator(app, ws_scope("/ws"))
    await comm.send_input({"type": "websocket.connect"})
    assert (await comm.receive_output(10))["type"] == "websocket.accept"
    (session,) = list(guard.registry)
    await comm.send_input({"type": "websocket.receive", "bytes": b"y" * (10 * CHUNK)})
    await until(lambda: session.buffered_bytes == 10 * CHUNK)
    release.set()  # the app reads from now on
    await until(lambda: len(seen) == 1)
    for _ in range(50):
        await comm.send_input({"type": "websocket.receive", "bytes": b"z" * CHUNK})
    await until(lambda: len(seen) == 51)
    await comm.send_input({"type": "websocket.disconnect", "code": 1000})
    await comm.wait(10)
    assert guard.status()["sessions"]["inbound_overflow_total"] == 0
    assert sum(len(m.get("bytes", b"")) for m in seen) == 60 * CHUNK
