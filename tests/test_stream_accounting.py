"""What a guarded stream adds to its session: held bytes (declared, backend) vs traffic, and
exact stream counters on every path (issue 9, A7 and B)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import guard_stream
from tests.support import FakeSource
from tests.support.guard import make_guard

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("hot_path")]
MiB = 2**20


@pytest.fixture
def guard() -> Guard:
    return make_guard(FakeSource(used=0))


async def chunks(*items: Any) -> AsyncIterator[Any]:
    for item in items:
        yield item


def counts(guard: Guard) -> tuple[int, int, int, int, int]:
    c = guard.registry.counters
    return (guard.registry.streams_open, c.streams_opened_total, c.streams_completed_total,
            c.streams_aborted_total, c.streams_disconnected_total)


# -- held bytes vs traffic -----------------------------------------------------------------


async def test_a_stream_that_sent_7_mib_holds_nothing(guard: Guard) -> None:
    session = guard.registry.open("http")
    stream = guard_stream(chunks(*[b"x" * MiB] * 7), session=session)
    async for _ in stream:
        assert session.held_bytes == 0
    assert stream.bytes_out == 7 * MiB
    assert guard.status()["held"]["total_bytes"] == 0


async def test_a_stream_holding_a_200_mib_buffer_is_held_200_mib(guard: Guard) -> None:
    session = guard.registry.open("http")
    buffer: list[int] = [0]  # the app's buffer, by size (no need to allocate 200 MiB here)

    async def tokens() -> AsyncIterator[str]:
        for _ in range(3):
            buffer[0] += 100 * MiB
            yield "tok"

    stream = guard_stream(tokens(), session=session, held=lambda: buffer[0])
    assert await anext(stream) == "tok"
    assert session.held_bytes == session.declared_bytes == 100 * MiB
    assert await anext(stream) == "tok"
    assert session.held_bytes == 200 * MiB  # read after every chunk
    assert list(guard.registry.largest_streams()) == [session]
    assert session.bucket == (200 * MiB).bit_length()
    doc = guard.status(include_sessions=True)
    assert doc["held"]["declared_bytes"] == doc["held"]["total_bytes"] == 200 * MiB
    assert doc["session_list"][0]["held_bytes"] == 200 * MiB
    await stream.aclose()
    assert session.held_bytes == 0  # released with the stream


async def test_declare_held_replaces_and_rejects_bad_values(guard: Guard) -> None:
    session = guard.registry.open("http")
    stream = guard_stream(chunks("a"), session=session)
    stream.declare_held(5000)
    stream.declare_held(300)
    assert session.held_bytes == 300
    with pytest.raises(ValueError, match=">= 0"):
        stream.declare_held(-1)
    with pytest.raises(TypeError, match="int"):
        stream.declare_held(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        guard_stream(chunks("a"), session=session, held=7)  # type: ignore[arg-type]
    assert session.held_bytes == 300
    await stream.aclose()


async def test_a_failing_held_callable_ends_the_stream_and_raises(guard: Guard) -> None:
    session = guard.registry.open("http")
    calls: list[int] = []

    def held() -> int:
        calls.append(1)
        if len(calls) > 1:
            raise KeyError("app bug")
        return 0

    stream = guard_stream(chunks("a", "b"), session=session, held=held)
    with pytest.raises(KeyError):
        await anext(stream)
    assert stream.closed and stream.close_reason is CloseReason.ERROR
    assert counts(guard) == (0, 1, 0, 1, 0)


async def test_concurrent_streams_backend_bytes_add_up(guard: Guard) -> None:
    """Two requests of one session: neither overwrites the other, the first to end zeroes none."""
    session = guard.registry.open("websocket")
    first = guard_stream(chunks("a", "b"), session=session)
    second = guard_stream(chunks("c", "d"), session=session)
    first.set_backend_bytes(4096)
    second.set_backend_bytes(8192)
    assert session.backend_bytes == session.held_bytes == 12288
    first.set_backend_bytes(6144)
    assert session.backend_bytes == 14336
    await first.aclose()
    assert session.backend_bytes == 8192  # only first's bytes left
    assert guard.status(include_sessions=True)["session_list"][0]["backend_bytes"] == 8192
    await second.aclose()
    assert session.backend_bytes == 0


# -- exact stream counters (A7) ------------------------------------------------------------


async def closed_session(guard: Guard, reason: CloseReason) -> Session:
    session = guard.registry.open("http")
    await guard.close_session(session, reason)
    return session


async def test_stream_on_a_closed_session_never_iterated_leaves_open_exact(guard: Guard) -> None:
    session = await closed_session(guard, CloseReason.DISCONNECTED)
    stream = guard_stream(chunks("never"), session=session)
    assert counts(guard) == (0, 1, 0, 0, 1)  # opened and ended at once
    assert session.streams == ()
    assert guard.status()["streams"]["open"] == 0
    del stream
    gc.collect()
    assert counts(guard) == (0, 1, 0, 0, 1)


async def test_stream_on_a_closed_session_iterated_later_counts_once(guard: Guard) -> None:
    session = await closed_session(guard, CloseReason.EVICTED)
    stream = guard_stream(chunks("never"), session=session)
    assert [c async for c in stream] == []
    await stream.aclose()
    assert stream.close_reason is CloseReason.EVICTED
    assert counts(guard) == (0, 1, 0, 1, 0)


@pytest.mark.parametrize("end", ["aclose", "request_close", "session_close", "iterate"])
async def test_every_path_ends_a_stream_once(guard: Guard, end: str) -> None:
    session = guard.registry.open("http")
    stream = guard_stream(chunks("a"), session=session)
    stream.set_backend_bytes(100)
    assert counts(guard)[:2] == (1, 1)
    if end == "aclose":
        await stream.aclose()
    elif end == "request_close":
        await stream.request_close(CloseReason.TIMEOUT)
    elif end == "session_close":
        await guard.close_session(session, CloseReason.DISCONNECTED)
    else:
        assert [c async for c in stream] == ["a"]
    await stream.aclose()  # a second close changes nothing
    assert guard.registry.streams_open == 0
    assert sum(counts(guard)[2:]) == 1
    assert session.held_bytes == 0


async def test_never_iterated_stream_dropped_by_the_app_ends_with_its_session(
        guard: Guard) -> None:
    session = guard.registry.open("http")
    guard_stream(chunks("a"), session=session)  # the handler raised before returning it
    gc.collect()
    assert guard.registry.streams_open == 1  # the session still owns it
    await guard.close_session(session, CloseReason.ERROR)
    assert counts(guard) == (0, 1, 0, 1, 0)


async def test_stream_created_while_the_session_closes_is_counted_once(guard: Guard) -> None:
    session = guard.registry.open("http")
    late: list[Any] = []

    def make_stream(_: Session) -> None:  # a close hook that starts a stream: too late
        late.append(guard_stream(chunks("x"), session=session))

    guard.add_close_hook(make_stream)
    await guard.close_session(session, CloseReason.EVICTED)
    assert len(late) == 1 and guard.registry.streams_open == 0
    await asyncio.wait_for(late[0].aclose(), 5)
    assert counts(guard) == (0, 1, 0, 1, 0)
