from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import pytest

from llm_guard_sdk.context import bind_session, current_session, reset_session
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import GuardedStream, default_sizer, guard_stream
from tests.support import FakeSource, until
from tests.support.guard import make_guard as make_quiet_guard

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("hot_path")]


def make_guard(**overrides: Any) -> Guard:
    """A guard at zero pressure, so tick() never evicts or sheds in these tests."""
    return make_quiet_guard(FakeSource(used=0), **overrides)


@pytest.fixture
def guard() -> Guard:
    return make_guard()


class CountingSource:
    """What both source kinds share: the items, an optional block or failure, two counters."""

    def __init__(self, items: Iterable[Any], block: asyncio.Event | None = None,
                 fail: BaseException | None = None) -> None:
        self.items = list(items)
        self.block = block
        self.fail = fail
        self.started = 0
        self.closes = 0


class GenSource(CountingSource):
    """An async generator source; counts body starts and `finally` runs."""

    kind = "agen"

    def __init__(self, items: Iterable[Any], block: asyncio.Event | None = None,
                 fail: BaseException | None = None) -> None:
        super().__init__(items, block, fail)
        self.agen = self._gen()

    async def _gen(self) -> AsyncIterator[Any]:
        self.started += 1
        try:
            for item in self.items:
                yield item
            if self.block is not None:
                await self.block.wait()
            if self.fail is not None:
                raise self.fail
        finally:
            self.closes += 1

    @property
    def source(self) -> Any:
        return self.agen


class IterSource(CountingSource):
    """A hand-written async iterator with an aclose() counter."""

    kind = "iter"

    def __aiter__(self) -> IterSource:
        return self

    async def __anext__(self) -> Any:
        self.started += 1
        if self.items:
            return self.items.pop(0)
        if self.block is not None:
            await self.block.wait()
        if self.fail is not None:
            raise self.fail
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.closes += 1

    @property
    def source(self) -> Any:
        return self


Factory = Callable[..., GenSource | IterSource]


@pytest.fixture(params=[GenSource, IterSource], ids=["agen", "iter"])
def make_source(request: pytest.FixtureRequest) -> Factory:
    factory: Factory = request.param
    return factory


def start_consumer(stream: GuardedStream[Any]) -> tuple[asyncio.Task[str], list[Any]]:
    received: list[Any] = []

    async def consume() -> str:
        async for chunk in stream:
            received.append(chunk)
        return "ended"

    return asyncio.create_task(consume()), received


async def blocked_consumer(
    stream: GuardedStream[Any], chunks: int
) -> tuple[asyncio.Task[str], list[Any]]:
    task, received = start_consumer(stream)
    await until(lambda: len(received) == chunks and stream.waiting)
    return task, received


# -- normal end ----------------------------------------------------------------------------


async def test_normal_end_closes_source_once(guard: Guard, make_source: Factory) -> None:
    session = guard.registry.open("http")
    src = make_source(["a", "b", "c"])
    stream = guard_stream(src.source, session=session, name="chat")
    assert stream.name == "chat"
    assert session.streams == (stream,)
    assert guard.registry.streams_open == 1

    assert [chunk async for chunk in stream] == ["a", "b", "c"]
    assert src.closes == 1
    assert stream.closed
    assert stream.close_reason is CloseReason.COMPLETED
    assert session.streams == ()
    assert not session.closed
    assert guard.registry.streams_open == 0
    assert guard.registry.counters.streams_completed_total == 1
    assert guard.registry.counters.streams_aborted_total == 0

    # Iterating again ends at once and does not close again.
    assert [chunk async for chunk in stream] == []
    await stream.aclose()
    await guard.close_session(session, CloseReason.COMPLETED)
    assert src.closes == 1


async def test_normal_end_websocket_back_to_idle(guard: Guard) -> None:
    session = guard.registry.open("websocket")
    src = GenSource(["x"])
    stream = guard_stream(src.source, session=session)
    assert guard.registry.idle_count == 0
    assert [c async for c in stream] == ["x"]
    assert guard.registry.idle_count == 1
    assert list(guard.registry.idle_lru()) == [session]


async def test_default_name_is_source_type() -> None:
    src = IterSource([])
    stream = guard_stream(src.source)
    assert stream.name == "IterSource"
    await stream.aclose()


# -- consumer error ------------------------------------------------------------------------


async def test_consumer_raises_then_session_closed(guard: Guard, make_source: Factory) -> None:
    session = guard.registry.open("http")
    src = make_source(["a", "b", "c"])
    stream = guard_stream(src.source, session=session)
    seen: list[str] = []
    with pytest.raises(ValueError, match="boom"):
        async for chunk in stream:
            seen.append(chunk)
            raise ValueError("boom")
    assert seen == ["a"]

    await guard.close_session(session, CloseReason.ERROR)
    assert src.closes == 1
    assert stream.closed
    assert stream.close_reason is CloseReason.ERROR
    assert session.close_reason is CloseReason.ERROR
    assert session.streams == ()
    assert guard.registry.streams_open == 0
    assert guard.registry.counters.streams_aborted_total == 1

    # Closing again, or iterating the dead stream, changes nothing.
    await guard.close_session(session, CloseReason.ERROR)
    await stream.aclose()
    assert [c async for c in stream] == []
    assert src.closes == 1
    assert guard.registry.streams_open == 0


async def test_source_raises_closes_once_and_propagates(
    guard: Guard, make_source: Factory
) -> None:
    session = guard.registry.open("http")
    src = make_source(["a"], fail=RuntimeError("model died"))
    stream = guard_stream(src.source, session=session)
    seen = []
    with pytest.raises(RuntimeError, match="model died"):
        async for chunk in stream:
            seen.append(chunk)
    assert seen == ["a"]
    assert src.closes == 1
    assert stream.close_reason is CloseReason.ERROR
    assert guard.registry.counters.streams_aborted_total == 1
    await guard.close_session(session, CloseReason.ERROR)
    assert src.closes == 1


# -- closed while blocked ------------------------------------------------------------------


@pytest.mark.parametrize("reason", [CloseReason.EVICTED, CloseReason.DISCONNECTED])
async def test_session_closed_while_consumer_blocked(
    guard: Guard, make_source: Factory, reason: CloseReason
) -> None:
    session = guard.registry.open("http")
    never = asyncio.Event()
    src = make_source(["first"], block=never)
    stream = guard_stream(src.source, session=session)
    task, received = await blocked_consumer(stream, 1)
    assert src.closes == 0

    await guard.close_session(session, reason)
    # The consumer's `async for` ends quietly: no exception, not cancelled.
    assert await asyncio.wait_for(task, 5) == "ended"
    assert not task.cancelled()
    assert task.cancelling() == 0
    assert received == ["first"]
    assert src.closes == 1
    assert stream.closed
    assert stream.close_reason is reason
    assert session.close_reason is reason
    assert session.closed
    assert guard.registry.streams_open == 0
    assert not never.is_set()


async def test_consumer_task_usable_after_quiet_close(guard: Guard) -> None:
    # After the guard's cancellation is absorbed, the consumer can keep awaiting things.
    session = guard.registry.open("http")
    src = GenSource(["a"], block=asyncio.Event())
    stream = guard_stream(src.source, session=session)
    received: list[Any] = []

    async def consume() -> str:
        async for chunk in stream:
            received.append(chunk)
        await asyncio.sleep(0.01)  # would raise CancelledError if a cancel were left pending
        return "after"

    task = asyncio.create_task(consume())
    await until(lambda: bool(received) and stream.waiting)
    await guard.close_session(session, CloseReason.EVICTED)
    assert await asyncio.wait_for(task, 5) == "after"
    assert src.closes == 1


# -- closed before first __anext__ ---------------------------------------------------------


async def test_session_closed_before_first_anext_agen(guard: Guard) -> None:
    session = guard.registry.open("http")
    await guard.close_session(session, CloseReason.DISCONNECTED)
    src = GenSource(["never"])
    stream = guard_stream(src.source, session=session)
    assert [c async for c in stream] == []
    assert src.started == 0  # the body never ran ...
    assert src.agen.ag_frame is None  # ... yet the generator is closed
    assert src.closes == 0  # the try/finally was never entered
    assert stream.close_reason is CloseReason.DISCONNECTED
    assert guard.registry.streams_open == 0
    assert guard.registry.counters.streams_disconnected_total == 1
    assert session.streams == ()


async def test_session_closed_before_first_anext_iter(guard: Guard) -> None:
    session = guard.registry.open("http")
    await guard.close_session(session, CloseReason.EVICTED)
    src = IterSource(["never"])
    stream = guard_stream(src.source, session=session)
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    assert src.started == 0
    assert src.closes == 1
    assert stream.close_reason is CloseReason.EVICTED
    assert guard.registry.streams_open == 0
    assert guard.registry.counters.streams_aborted_total == 1


# -- outside cancellation ------------------------------------------------------------------


async def test_outside_cancellation_propagates_and_closes_once(
    guard: Guard, make_source: Factory
) -> None:
    session = guard.registry.open("http")
    src = make_source(["a"], block=asyncio.Event())
    stream = guard_stream(src.source, session=session)
    task, _ = await blocked_consumer(stream, 1)

    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert src.closes == 1
    assert stream.closed
    assert stream.close_reason is CloseReason.ERROR
    assert not session.closed  # the guard did not close the session
    assert guard.registry.streams_open == 0
    assert guard.registry.counters.streams_aborted_total == 1

    await guard.close_session(session, CloseReason.DISCONNECTED)
    await stream.aclose()
    assert src.closes == 1


# -- aclose --------------------------------------------------------------------------------


async def test_aclose_twice_is_harmless(guard: Guard, make_source: Factory) -> None:
    session = guard.registry.open("http")
    src = make_source([b"ab", b"cd"])
    stream = guard_stream(src.source, session=session)
    assert await stream.__anext__() == b"ab"
    await stream.aclose()
    await stream.aclose()
    assert src.closes == 1
    assert stream.close_reason is CloseReason.COMPLETED
    assert guard.registry.streams_open == 0  # decremented once, not twice
    assert guard.registry.counters.streams_completed_total == 1
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()
    await guard.close_session(session, CloseReason.COMPLETED)
    assert src.closes == 1


async def test_aclose_before_iteration_closes_unstarted_generator(guard: Guard) -> None:
    session = guard.registry.open("http")
    src = GenSource(["a"])
    stream = guard_stream(src.source, session=session)
    await stream.aclose()
    assert src.started == 0
    assert src.agen.ag_frame is None
    assert guard.registry.streams_open == 0


async def test_async_context_manager(guard: Guard) -> None:
    session = guard.registry.open("http")
    src = GenSource(["a", "b"])
    with pytest.raises(KeyError):
        async with guard_stream(src.source, session=session) as stream:
            assert await stream.__anext__() == "a"
            raise KeyError("x")
    assert src.closes == 1
    assert stream.close_reason is CloseReason.ERROR


async def test_source_without_aclose() -> None:
    class Plain:
        def __init__(self) -> None:
            self.n = 0

        def __aiter__(self) -> Plain:
            return self

        async def __anext__(self) -> int:
            self.n += 1
            if self.n > 2:
                raise StopAsyncIteration
            return self.n

    stream = guard_stream(Plain())
    assert [c async for c in stream] == [1, 2]
    assert stream.closed


# -- accounting ----------------------------------------------------------------------------


def test_default_sizer() -> None:
    assert default_sizer(b"abc") == 3
    assert default_sizer(bytearray(5)) == 5
    assert default_sizer(memoryview(b"xy")) == 2
    assert default_sizer("héllo") == 5
    assert default_sizer(42) == 0
    assert default_sizer({"text": "abc"}) == 0


async def test_chunks_are_traffic_not_held(guard: Guard) -> None:
    session = guard.registry.open("http")
    src = GenSource([b"abc", "hello", 123, b"z" * 100])
    stream = guard_stream(src.source, session=session)
    assert [c async for c in stream] == [b"abc", "hello", 123, b"z" * 100]
    assert stream.bytes_out == 108  # traffic: what the stream produced
    assert stream.chunks == 4
    assert session.held_bytes == 0  # a sent chunk is not memory the session holds


# -- chunk timeout -------------------------------------------------------------------------


async def test_chunk_timeout_closes_stuck_stream(make_source: Factory) -> None:
    guard = make_guard(chunk_timeout=0.05)
    session = guard.registry.open("http")
    src = make_source(["a"], block=asyncio.Event())
    stream = guard_stream(src.source, session=session)
    task, _ = await blocked_consumer(stream, 1)
    await guard.tick()  # first sample sees it waiting: the clock starts here
    assert not stream.closed
    await asyncio.sleep(0.1)
    await guard.tick()
    assert await asyncio.wait_for(task, 5) == "ended"
    assert src.closes == 1
    assert stream.close_reason is CloseReason.TIMEOUT
    assert not session.closed  # only the stream times out
    assert guard.registry.streams_open == 0
    assert guard.registry.counters.streams_aborted_total == 1


async def test_chunk_timeout_spares_streams_within_limit() -> None:
    guard = make_guard(chunk_timeout=60)
    session = guard.registry.open("http")
    src = GenSource(["a"], block=asyncio.Event())
    stream = guard_stream(src.source, session=session)
    task, _ = await blocked_consumer(stream, 1)
    await guard.tick()
    await asyncio.sleep(0)
    assert not task.done()
    assert not stream.closed
    await guard.close_session(session, CloseReason.COMPLETED)
    assert await asyncio.wait_for(task, 5) == "ended"
    assert src.closes == 1


# -- close requested while a chunk is in flight --------------------------------------------


async def test_close_requested_while_chunk_in_flight_drops_chunk(guard: Guard) -> None:
    session = guard.registry.open("http")
    holder: dict[str, GuardedStream[str]] = {}
    closes = 0

    async def source() -> AsyncIterator[str]:
        nonlocal closes
        try:
            yield "a"
            # The stream is told to close from inside the consumer's own __anext__.
            await holder["s"].request_close(CloseReason.EVICTED)
            yield "b"
            yield "c"
        finally:
            closes += 1

    holder["s"] = stream = guard_stream(source(), session=session)
    assert [c async for c in stream] == ["a"]
    assert closes == 1
    assert stream.close_reason is CloseReason.EVICTED


# -- no session ----------------------------------------------------------------------------


async def test_current_session_none_outside_middleware(make_source: Factory) -> None:
    assert current_session() is None
    src = make_source(["a", "b"])
    stream = guard_stream(src.source)
    assert stream.session is None
    assert [c async for c in stream] == ["a", "b"]
    assert src.closes == 1
    assert stream.close_reason is CloseReason.COMPLETED


async def test_no_session_error_and_aclose(make_source: Factory) -> None:
    src = make_source(["a"], fail=OSError("x"))
    stream = guard_stream(src.source)
    with pytest.raises(OSError, match="x"):
        async for _ in stream:
            pass
    assert src.closes == 1
    await stream.aclose()
    assert src.closes == 1

    src2 = make_source(["a", "b"])
    stream2 = guard_stream(src2.source)
    assert await stream2.__anext__() == "a"
    await stream2.aclose()
    await stream2.aclose()
    assert src2.closes == 1


async def test_guard_stream_binds_current_session(guard: Guard) -> None:
    session: Session = guard.registry.open("http")
    token = bind_session(session)
    try:
        assert current_session() is session
        stream = guard_stream(GenSource([b"abcd"]).source)
    finally:
        reset_session(token)
    assert current_session() is None
    assert stream.session is session
    assert session.streams == (stream,)
    await stream.__anext__()
    assert stream.bytes_out == 4
    await stream.aclose()
