"""Pump-less idle WebSockets in process: the app's own receive() reads the server.

The server's ``receive`` here is a queue that fails the test if two tasks ever wait in it at
once. Assertions are on counts and states (which task reads, which tasks exist), never on time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig, GuardMiddleware, guard_stream
from llm_guard_sdk.asgi.inbox import IDLE_INBOX
from llm_guard_sdk.asgi.websocket import WebSocketConnection
from llm_guard_sdk.session import Session
from tests.support import FakeSource, until, ws_scope

pytestmark = pytest.mark.anyio


def make_guard(**overrides: Any) -> Guard:
    return Guard(GuardConfig.defaults(sources=("process",), **overrides),
                 sources=[FakeSource(used=0, limit=1000)])


class Server:
    """An in-memory WebSocket server side: ``receive`` asserts it has one reader at a time."""

    def __init__(self) -> None:
        self.inbound: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.readers = 0
        self.reads = 0
        self.overlaps = 0

    async def receive(self) -> dict[str, Any]:
        self.readers += 1
        self.reads += 1
        if self.readers > 1:
            self.overlaps += 1
        try:
            return await self.inbound.get()
        finally:
            self.readers -= 1

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def frame(self, text: str) -> None:
        self.inbound.put_nowait({"type": "websocket.receive", "text": text})

    def leave(self, code: int = 1000) -> None:
        self.inbound.put_nowait({"type": "websocket.disconnect", "code": code})


def pumps() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if not t.done() and getattr(
        t.get_coro(), "__qualname__", "").endswith("._run_pump")]


class ChatApp:
    """Accept, then a loop of receive; ``busy`` makes it work (not reading) after each frame."""

    def __init__(self) -> None:
        self.got: list[dict[str, Any]] = []
        self.busy: asyncio.Event | None = None
        self.waiting = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            self.waiting.set()
            message = await receive()
            self.waiting.clear()
            self.got.append(message)
            if message["type"] == "websocket.disconnect":
                return
            if self.busy is not None:
                await self.busy.wait()
            await send({"type": "websocket.send", "text": "echo"})


async def start(app: Any, guard: Guard, server: Server) -> tuple[asyncio.Task[None], Session]:
    server.inbound.put_nowait({"type": "websocket.connect"})
    task = asyncio.create_task(GuardMiddleware(app, guard=guard)(
        ws_scope("/ws"), server.receive, server.send))
    await until(lambda: len(guard.registry) == 1 and server.sent)
    (session,) = list(guard.registry)
    return task, session


def connection(session: Session) -> WebSocketConnection:
    conn = session.connection
    assert isinstance(conn, WebSocketConnection)
    return conn


async def test_idle_app_reads_the_server_itself_and_the_disconnect_closes_the_session() -> None:
    guard, server, app = make_guard(), Server(), ChatApp()
    task, session = await start(app, guard, server)
    conn = connection(session)
    for i in range(3):
        server.frame(f"m{i}")
    await until(lambda: len(app.got) == 3 and conn.reading_directly)
    assert not pumps() and not conn.pumping, "an idle app's read needs no pump"
    assert session.chunks_in == 3
    server.leave(1001)
    await asyncio.wait_for(task, 10)
    assert app.got[-1] == {"type": "websocket.disconnect", "code": 1001}
    assert session.closed and session.close_reason is CloseReason.DISCONNECTED
    assert len(guard.registry) == 0 and server.overlaps == 0


async def test_a_busy_app_gets_a_pump_that_hands_back_when_it_reads_again() -> None:
    guard, server, app = make_guard(), Server(), ChatApp()
    app.busy = asyncio.Event()
    task, session = await start(app, guard, server)
    conn = connection(session)
    server.frame("prompt")
    await until(lambda: conn.pumping)  # the app works on it: the pump reads meanwhile
    assert not conn.reading_directly
    app.busy.set()  # back to receive(): the pump stops, the app reads directly again
    await until(lambda: conn.reading_directly and not conn.pumping)
    assert not pumps()
    for i in range(20):
        server.frame(f"m{i}")
    await until(lambda: len(app.got) == 21)
    assert [m.get("text") for m in app.got] == ["prompt", *(f"m{i}" for i in range(20))]
    server.leave()
    await asyncio.wait_for(task, 10)
    assert session.close_reason is CloseReason.DISCONNECTED
    assert server.overlaps == 0


async def test_the_client_leaving_while_the_app_streams_without_reading_stops_the_stream() -> None:
    guard, server = make_guard(), Server()
    stopped = asyncio.Event()

    async def tokens() -> AsyncIterator[str]:
        try:
            while True:
                yield "t"
                await asyncio.sleep(0)
        finally:
            stopped.set()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await receive()
        async with guard_stream(tokens()) as stream:
            async for token in stream:
                await send({"type": "websocket.send", "text": token})

    task, session = await start(app, guard, server)
    server.frame("go")
    await until(lambda: session.chunks_out > 10)
    assert connection(session).pumping
    server.leave(1006)
    await asyncio.wait_for(stopped.wait(), 10)
    await asyncio.wait_for(task, 10)
    assert session.close_reason is CloseReason.DISCONNECTED
    assert guard.status()["streams"]["disconnected_total"] == 1
    assert server.overlaps == 0


async def test_eviction_wakes_the_app_waiting_in_a_direct_read_and_closes_1013() -> None:
    guard, server, app = make_guard(), Server(), ChatApp()
    task, session = await start(app, guard, server)
    conn = connection(session)
    await until(lambda: conn.reading_directly)
    await guard.close_session(session, CloseReason.EVICTED)
    await asyncio.wait_for(task, 10)
    assert app.got[-1]["type"] == "websocket.disconnect" and app.got[-1]["code"] == 1013
    assert server.sent[-1]["type"] == "websocket.close" and server.sent[-1]["code"] == 1013
    assert session.close_reason is CloseReason.EVICTED
    assert guard.status()["sessions"]["evicted_total"] == 1
    assert len(guard.registry) == 0 and server.overlaps == 0


async def test_the_apps_own_cancel_of_a_direct_read_stays_a_cancel_and_loses_no_frame() -> None:
    guard, server = make_guard(), Server()
    got: list[str] = []
    timeouts = 0

    async def app(scope: Any, receive: Any, send: Any) -> None:
        nonlocal timeouts
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            try:
                message = await asyncio.wait_for(receive(), 0.01)
            except TimeoutError:
                timeouts += 1
                continue
            if message["type"] == "websocket.disconnect":
                return
            got.append(message["text"])

    task, session = await start(app, guard, server)
    await until(lambda: timeouts >= 3)
    for i in range(10):
        server.frame(f"m{i}")
        await until(lambda i=i: len(got) == i + 1)  # type: ignore[misc]
    server.leave()
    await asyncio.wait_for(task, 10)
    assert got == [f"m{i}" for i in range(10)]
    assert session.close_reason is CloseReason.DISCONNECTED and server.overlaps == 0


async def test_concurrent_app_readers_share_one_server_reader() -> None:
    guard, server = make_guard(), Server()
    got: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})

        async def reader() -> None:
            while (message := await receive())["type"] != "websocket.disconnect":
                got.append(message["text"])

        await asyncio.gather(*(reader() for _ in range(4)))

    task, session = await start(app, guard, server)
    for i in range(40):
        server.frame(f"m{i}")
    await until(lambda: len(got) == 40)
    assert sorted(got) == sorted(f"m{i}" for i in range(40))
    server.leave()
    await asyncio.wait_for(task, 10)
    assert session.close_reason is CloseReason.DISCONNECTED and server.overlaps == 0
    assert (IDLE_INBOX.readers, IDLE_INBOX.pending, IDLE_INBOX.final) == (0, 0, None), \
        "the shared idle inbox is never written to"
