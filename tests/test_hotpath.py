"""The compiled hot path against the pure-Python reference, on the edges a C type can get wrong.

Each test runs twice (``hot_path`` fixture: compiled, then pure Python) and asserts the same
outcome, so the two implementations cannot drift apart.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk import hotpath
from llm_guard_sdk.asgi.http import HttpConnection
from llm_guard_sdk.session import CloseReason
from llm_guard_sdk.stream import GuardedStream
from tests.support import make_guard

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("hot_path")]


def test_the_implementation_in_use_is_reported(hot_path: str) -> None:
    assert hotpath.implementation() == hot_path
    assert make_guard().status()["runtime"]["hot_path"] == hot_path


async def items(*values: Any) -> AsyncIterator[Any]:
    for value in values:
        yield value


class Weird(Exception):
    pass


async def test_any_chunk_value_comes_through_unchanged() -> None:
    """Tuples, exceptions and None are returned values, not StopIteration arguments."""
    error = Weird("a chunk, not raised")
    chunks = [(1, 2), (), error, None, StopIteration(3), b"b", "s"]
    stream = GuardedStream(items(*chunks), None)
    assert [c async for c in stream] == chunks
    assert stream.chunks == len(chunks)
    assert stream.bytes_out == 2  # only the bytes and the str are sized


async def test_sizes_follow_default_sizer_for_subclasses_and_buffers() -> None:
    class Text(str):
        pass

    chunks = [bytearray(b"abc"), memoryview(b"abcd"), Text("xy"), 7]
    stream = GuardedStream(items(*chunks), None)
    assert [c async for c in stream] == chunks
    assert (stream.chunks, stream.bytes_out) == (4, 9)


class RaisesAtOnce:
    """An async iterator whose ``__anext__`` raises instead of returning an awaitable."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.closed = 0

    def __aiter__(self) -> RaisesAtOnce:
        return self

    def __anext__(self) -> Any:
        raise self.exc

    async def aclose(self) -> None:
        self.closed += 1


async def test_an_anext_that_ends_at_once_still_closes_the_source() -> None:
    source = RaisesAtOnce(StopAsyncIteration())
    stream = GuardedStream(source, None)
    assert [c async for c in stream] == []
    assert stream.closed and stream.close_reason is CloseReason.COMPLETED
    assert source.closed == 1


async def test_an_anext_that_fails_at_once_raises_and_closes() -> None:
    source = RaisesAtOnce(Weird("broken"))
    stream = GuardedStream(source, None)
    with pytest.raises(Weird, match="broken"):
        await anext(stream)
    assert stream.closed and stream.close_reason is CloseReason.ERROR
    assert source.closed == 1


class FutureSource:
    """``__anext__`` returns a Future (an awaitable that is no coroutine)."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def __aiter__(self) -> FutureSource:
        return self

    def __anext__(self) -> asyncio.Future[Any]:
        future = asyncio.get_running_loop().create_future()
        if self.values:
            value = self.values.pop(0)
            asyncio.get_running_loop().call_soon(future.set_result, value)
        else:
            future.set_exception(StopAsyncIteration())
        return future


async def test_a_source_of_futures_is_awaited_through() -> None:
    stream = GuardedStream(FutureSource([b"a", b"bc"]), None)
    assert [c async for c in stream] == [b"a", b"bc"]
    assert (stream.chunks, stream.bytes_out, stream.closed) == (2, 3, True)


async def test_a_second_concurrent_anext_is_refused_like_an_async_generator() -> None:
    gate = asyncio.Event()

    async def slow() -> AsyncIterator[bytes]:
        await gate.wait()
        yield b"x"

    stream = GuardedStream(slow(), None)
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="already running"):
        await stream.__anext__()
    gate.set()
    assert await first == b"x"
    await stream.aclose()


async def test_a_cancel_of_the_consumer_reaches_the_source_and_propagates() -> None:
    entered = asyncio.Event()
    cleaned: list[str] = []

    async def waits() -> AsyncIterator[bytes]:
        try:
            entered.set()
            await asyncio.Event().wait()
            yield b"never"
        finally:
            cleaned.append("source")

    stream = GuardedStream(waits(), None)

    async def consume() -> None:
        async for _ in stream:
            pass

    task = asyncio.create_task(consume())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["source"]
    assert stream.closed and stream.close_reason is CloseReason.ERROR


async def test_the_guard_stops_a_blocked_stream_quietly() -> None:
    guard = make_guard()
    session = guard.registry.open("http", "/x")
    entered = asyncio.Event()

    async def waits() -> AsyncIterator[bytes]:
        yield b"first"
        entered.set()
        await asyncio.Event().wait()
        yield b"never"

    stream = GuardedStream(waits(), session)
    got: list[bytes] = []

    async def consume() -> None:
        async for chunk in stream:
            got.append(chunk)

    task = asyncio.create_task(consume())
    await entered.wait()
    assert stream.waiting
    await stream.request_close(CloseReason.EVICTED)
    await asyncio.wait_for(task, 10)  # ended quietly: no CancelledError
    assert got == [b"first"] and not task.cancelled()
    assert stream.close_reason is CloseReason.EVICTED and session.stream_count == 0


async def test_streams_and_runners_are_collected() -> None:
    """The runner and the stream reference each other: the cycle must be collectable."""
    stream = GuardedStream(items(b"a", b"b"), None)
    assert await anext(stream) == b"a"  # never finished: only the collector frees it
    ref = weakref.ref(stream)
    del stream
    gc.collect()
    assert ref() is None


async def test_a_finished_stream_is_freed_without_waiting_for_a_collection() -> None:
    stream = GuardedStream(items(b"a"), None)
    assert [c async for c in stream] == [b"a"]
    ref = weakref.ref(stream)
    del stream
    assert ref() is None


async def never_receive() -> dict[str, Any]:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


class Server:
    """A server ``send`` that records messages; ``result`` picks what it returns."""

    def __init__(self, result: str = "coroutine") -> None:
        self.sent: list[Any] = []
        self.result = result

    def __call__(self, message: Any) -> Any:
        self.sent.append(message)
        if self.result == "future":
            future = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future
        if self.result == "raise":
            raise OSError("gone")

        async def done() -> None:
            return None

        return done()


def connection(server: Server) -> tuple[HttpConnection, Any]:
    guard = make_guard()
    session = guard.registry.open("http", "/x")
    return HttpConnection(guard, session, never_receive, server), session


async def closed(conn: HttpConnection) -> None:
    """End the connection as the middleware does: session closed, connection finished."""
    await conn.guard.close_session(conn.session, CloseReason.COMPLETED)
    await conn.finish()


async def test_body_chunks_are_counted_whatever_shape_the_message_has() -> None:
    server = Server()
    conn, session = connection(server)
    send = conn.app_send
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"abc", "more_body": True})
    await send({"type": "http.response.body", "body": bytearray(b"de"), "more_body": 1})
    await send({"type": "http.response.body", "more_body": True})  # no body: 0 bytes
    assert not conn.response_complete
    await send({"type": "http.response.body", "body": b"f"})  # no more_body: the end
    assert (session.chunks_out, session.bytes_out, conn.response_complete) == (4, 6, True)
    start = server.sent[0]
    assert (b"x-llm-guard-session", session.id.encode()) in start["headers"]
    await conn.finish()


async def test_a_mapping_that_is_no_dict_and_any_other_type_take_the_python_path() -> None:
    from types import MappingProxyType

    server = Server()
    conn, session = connection(server)
    send = conn.app_send
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send(MappingProxyType({"type": "http.response.body", "body": b"ab",
                                 "more_body": True}))
    await send({"type": "http.response.trailers", "headers": [], "more_trailers": False})
    assert (session.chunks_out, session.bytes_out) == (1, 2)
    assert [m["type"] for m in server.sent] == [
        "http.response.start", "http.response.body", "http.response.trailers"]
    await conn.finish()


async def test_a_server_send_that_returns_a_future_is_still_watched() -> None:
    server = Server("future")
    conn, session = connection(server)
    await conn.app_send({"type": "http.response.body", "body": b"ab", "more_body": True})
    assert session.chunks_out == 1 and not conn.sending
    await conn.finish()


async def test_a_server_send_that_raises_at_once_raises_to_the_app() -> None:
    server = Server("raise")
    conn, _ = connection(server)
    with pytest.raises(OSError, match="gone"):
        await conn.app_send({"type": "http.response.body", "body": b"ab", "more_body": True})
    await conn.finish()


async def test_a_body_that_has_no_length_is_a_type_error_as_len_raises() -> None:
    conn, _ = connection(Server())
    with pytest.raises(TypeError):
        await conn.app_send({"type": "http.response.body", "body": 5, "more_body": True})
    await conn.finish()


async def test_nothing_reaches_the_server_once_the_guard_ended_the_response() -> None:
    server = Server()
    conn, session = connection(server)
    send = conn.app_send
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await conn.terminate(CloseReason.EVICTED)
    sent = len(server.sent)
    await send({"type": "http.response.body", "body": b"late", "more_body": True})
    assert len(server.sent) == sent and session.chunks_out == 0
    await conn.finish()


async def test_connections_are_freed_without_waiting_for_a_collection() -> None:
    conn, _ = connection(Server())
    send = conn.app_send
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    await closed(conn)
    ref = weakref.ref(conn)
    del conn, send
    assert ref() is None  # by reference counting: no cycle left after finish()
