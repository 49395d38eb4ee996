"""Stream timeouts (actions/timeouts.py) on their own: a registry and stream-shaped objects."""

from __future__ import annotations

import time

import pytest

from llm_guard_sdk.actions import StreamTimeouts
from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import CloseReason
from tests.support.guard import FakeStream

pytestmark = pytest.mark.anyio


def open_stream(registry: SessionRegistry) -> FakeStream:
    session = registry.open("http")
    stream = FakeStream("s")
    stream.started_at = time.monotonic()
    session.add_stream(stream)
    return stream


async def test_no_limits_touch_nothing() -> None:
    registry = SessionRegistry(10)
    stream = open_stream(registry)
    stream.waiting = True
    timeouts = StreamTimeouts(registry, chunk_timeout=None, stream_timeout=None)
    assert await timeouts.run() == 0
    assert stream.stuck_chunks == -1


async def test_chunk_timeout_counts_from_the_first_sample_that_sees_the_wait() -> None:
    registry = SessionRegistry(10)
    stream = open_stream(registry)
    timeouts = StreamTimeouts(registry, chunk_timeout=30, stream_timeout=None)
    stream.waiting = True
    assert await timeouts.run() == 0  # the clock starts now
    assert stream.stuck_chunks == 0
    stream.stuck_since -= 31  # as if 31 s passed without a chunk
    assert await timeouts.run() == 1
    assert stream.closed_with is CloseReason.TIMEOUT


async def test_a_new_chunk_restarts_the_chunk_clock() -> None:
    registry = SessionRegistry(10)
    stream = open_stream(registry)
    timeouts = StreamTimeouts(registry, chunk_timeout=30, stream_timeout=None)
    stream.waiting = True
    await timeouts.run()
    stream.stuck_since -= 31
    stream.chunks = 1  # a chunk arrived since the last sample
    assert await timeouts.run() == 0
    assert stream.closed_with is None


async def test_stream_timeout_closes_old_streams_even_when_busy() -> None:
    registry = SessionRegistry(10)
    old, young = open_stream(registry), open_stream(registry)
    old.started_at -= 601
    timeouts = StreamTimeouts(registry, chunk_timeout=None, stream_timeout=600)
    assert await timeouts.run() == 1
    assert old.closed_with is CloseReason.TIMEOUT
    assert young.closed_with is None
