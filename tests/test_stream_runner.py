"""GuardedStream's runner: the one async generator that carries a stream's chunks."""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk.session import CloseReason
from llm_guard_sdk.stream import GuardedStream
from tests.support import FakeSource
from tests.support.guard import make_guard

pytestmark = pytest.mark.usefixtures("hot_path")


async def tokens(n: int) -> AsyncIterator[bytes]:
    for _ in range(n):
        yield b"tok"


def test_async_for_drives_an_async_generator_and_anext_the_same_one(hot_path: str) -> None:
    async def main() -> None:
        stream = GuardedStream(tokens(3), None)
        it = aiter(stream)
        # The pure-Python runner is an async generator; the compiled one behaves as one.
        assert inspect.isasyncgen(it) == (hot_path == "python")
        assert aiter(stream) is it  # one runner per stream
        assert await stream.__anext__() == b"tok"  # __anext__ drives the same runner
        assert [x async for x in stream] == [b"tok", b"tok"]
        assert stream.closed and stream.close_reason is CloseReason.COMPLETED
        assert (stream.chunks, stream.bytes_out) == (3, 9)
        # ensure_future accepts what __anext__ returns, as for any async generator.
        with pytest.raises(StopAsyncIteration):
            await asyncio.ensure_future(stream.__anext__())

    asyncio.run(main())


def test_closing_between_chunks_leaves_no_async_generator_suspended(hot_path: str) -> None:
    started: list[Any] = []

    async def main() -> None:
        old = sys.get_asyncgen_hooks()

        def firstiter(agen: Any) -> None:
            started.append(agen)
            if old.firstiter is not None:
                old.firstiter(agen)

        sys.set_asyncgen_hooks(firstiter=firstiter, finalizer=old.finalizer)
        guard = make_guard(FakeSource(used=0))
        session = guard.registry.open("http", "/x")
        stream = GuardedStream(tokens(5), session)
        assert await anext(stream) == b"tok"  # the runner now sits between chunks
        await stream.request_close(CloseReason.EVICTED)  # from outside, between chunks
        assert stream.closed and stream.close_reason is CloseReason.EVICTED
        assert session.stream_count == 0
        with pytest.raises(StopAsyncIteration):
            await anext(stream)

    asyncio.run(main())
    runners = [a for a in started if a.ag_code.co_name == "_run"]
    assert len(runners) == (1 if hot_path == "python" else 0)  # the compiled one is no agen
    assert all(agen.ag_frame is None for agen in started)  # source and runner both finished


def test_a_stream_never_iterated_starts_no_async_generator() -> None:
    started: list[Any] = []

    async def main() -> None:
        old = sys.get_asyncgen_hooks()
        sys.set_asyncgen_hooks(firstiter=started.append, finalizer=old.finalizer)
        try:
            stream = GuardedStream(tokens(2), None)
            await stream.aclose()
            assert stream.closed
        finally:
            sys.set_asyncgen_hooks(*old)

    asyncio.run(main())
    assert [a for a in started if a.ag_code.co_name == "_run"] == []  # no runner was made
