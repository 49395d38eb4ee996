"""Closing a session never breaks the protocol: a failing step is counted and the rest run, the
connection's tasks always end, and nothing is sent after the app returned."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig, GuardMiddleware, Session, guard_stream
from llm_guard_sdk.context import current_session
from tests.support import FakeSource, ProtocolSend, http_scope, receive_request, until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("hot_path")]


def make(**config: Any) -> Guard:
    return Guard(GuardConfig(sources=("process",), **config), sources=[FakeSource()])


def connection_tasks() -> list[asyncio.Task[Any]]:
    """The guard's per-connection tasks still pending (receive pumps and terminators)."""
    return [t for t in asyncio.all_tasks() if not t.done() and getattr(
        t.get_coro(), "__qualname__", "").endswith(("._run_pump", "._terminate_later"))]


async def breaks_on_close() -> AsyncIterator[str]:
    """A model stream whose cleanup raises (a buggy backend client)."""
    try:
        yield "t0"
        yield "t1"
    finally:
        raise RuntimeError("cleanup bug")


class Recorded:
    def __init__(self, guard: Guard) -> None:
        self.ran: list[str] = []
        guard.add_close_hook(self.fail)
        guard.add_close_hook(lambda s: self.ran.append("hook"))

    def fail(self, session: Session) -> None:
        raise RuntimeError("hook bug")

    def callbacks(self, session: Session) -> None:
        session.on_close(self.fail)
        session.on_close(lambda s: self.ran.append("callback"))


async def test_stream_failing_on_close_when_the_app_returns() -> None:
    """The app leaves a guarded stream open; closing it raises: the rest still runs."""
    guard = make()
    recorded = Recorded(guard)
    seen: list[Session] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        session = current_session()
        assert session is not None
        seen.append(session)
        recorded.callbacks(session)
        stream = guard_stream(breaks_on_close())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": (await anext(stream)).encode()})
        # returns with the stream still open (a handler that forgot to close it)

    send = ProtocolSend()
    await GuardMiddleware(app, guard=guard)(http_scope("/"), receive_request(), send)
    send.close()
    assert connection_tasks() == []  # the receive pump ended with the app
    assert send.violations == []
    assert recorded.ran == ["hook", "callback"]
    assert guard.internal_errors_total == 3  # the stream close, the hook, the callback
    (session,) = seen
    assert session.closed and guard.registry.get(session.id) is None
    assert guard.status()["streams"]["open"] == 0


async def test_eviction_with_a_stream_failing_on_close_still_ends_the_connection() -> None:
    """Step 2 (streams) fails: step 3 (the connection is told) and the hooks still run."""
    guard = make(close_grace=0)
    recorded = Recorded(guard)
    told: list[str] = []
    opened = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        session = current_session()
        assert session is not None
        recorded.callbacks(session)
        stream = guard_stream(breaks_on_close())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": (await anext(stream)).encode(),
                    "more_body": True})
        assert (await receive())["type"] == "http.request"
        opened.set()
        told.append((await receive())["type"])  # waits until the guard says the client left
        await asyncio.Event().wait()  # then hangs: the terminator must end the response

    send = ProtocolSend()
    task = asyncio.create_task(GuardMiddleware(app, guard=guard)(http_scope("/"),
                                                                 receive_request(), send))
    await asyncio.wait_for(opened.wait(), 10)
    (session,) = guard.registry
    await guard.close_session(session, CloseReason.EVICTED)  # does not raise
    await until(lambda: send.complete and bool(told))
    assert told == ["http.disconnect"]
    assert send.types[-1] == "http.response.body" and send.messages[-1]["body"] == b""
    assert recorded.ran == ["hook", "callback"]
    assert guard.internal_errors_total == 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    send.close()
    assert connection_tasks() == []
    assert send.violations == []


async def test_nothing_is_sent_after_the_app_returned() -> None:
    """Evicted mid-response, the app returns before close_grace: the terminator never fires."""
    guard = make(close_grace=0.05)
    recorded = Recorded(guard)
    opened = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        session = current_session()
        assert session is not None
        recorded.callbacks(session)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        assert (await receive())["type"] == "http.request"
        opened.set()
        assert (await receive())["type"] == "http.disconnect"
        # returns without finishing the response, as Starlette does on a disconnect

    send = ProtocolSend()
    task = asyncio.create_task(GuardMiddleware(app, guard=guard)(http_scope("/"),
                                                                 receive_request(), send))
    await asyncio.wait_for(opened.wait(), 10)
    (session,) = guard.registry
    await guard.close_session(session, CloseReason.EVICTED)
    await asyncio.wait_for(task, 10)
    send.close()
    assert connection_tasks() == []  # the terminator was cancelled, not left to fire
    await asyncio.sleep(0.2)  # past close_grace: a leftover terminator would send now
    assert send.violations == []
    assert send.types == ["http.response.start", "http.response.body"]
    assert recorded.ran == ["hook", "callback"] and guard.internal_errors_total == 2


async def test_connection_tasks_end_when_the_close_is_cancelled() -> None:
    """The app's task is cancelled while the guard closes the session: the pump still ends."""
    guard = make()
    closing = asyncio.Event()

    async def slow_close_model() -> AsyncIterator[str]:
        try:
            yield "t0"
            yield "t1"
        finally:
            closing.set()
            await asyncio.Event().wait()  # a source whose cleanup never finishes

    async def app(scope: Any, receive: Any, send: Any) -> None:
        stream = guard_stream(slow_close_model())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": (await anext(stream)).encode()})

    send = ProtocolSend()
    task = asyncio.create_task(GuardMiddleware(app, guard=guard)(http_scope("/"),
                                                                 receive_request(), send))
    await asyncio.wait_for(closing.wait(), 10)
    assert connection_tasks()  # the pump runs while the close hangs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: not connection_tasks())
    send.close()
    assert send.violations == []
