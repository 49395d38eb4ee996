"""What the leak tools take from a closing session, through the core's public surface only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig, GuardedStream
from llm_guard_sdk.leaks import LeakExtension, LeakSettings, LeakSweeper
from llm_guard_sdk.leaks.runtime.tracking import SessionWatch, stream_parts

pytestmark = pytest.mark.anyio


async def tokens() -> AsyncIterator[str]:
    yield "a"


class Iterable:
    """An async iterable whose ``__aiter__`` returns a new generator (not itself)."""

    async def __aiter__(self) -> AsyncIterator[str]:
        yield "a"


def make() -> Guard:
    return Guard(GuardConfig.defaults(sources=("process",)))


def test_extension_enables_the_sweeper_once() -> None:
    guard = make()
    extension = LeakExtension(LeakSettings.defaults(leak_grace=0, log_content=True))
    assert extension.name == "leaks"
    extension.setup(guard)
    sweeper = guard.extensions["leaks"]
    assert isinstance(sweeper, LeakSweeper)
    assert (sweeper.grace, sweeper.limits.log_content) == (0, True)
    extension.setup(guard)
    assert guard.extensions["leaks"] is sweeper
    assert {"/leaks", "/snapshot"} <= set(guard.control_routes)


def test_stream_parts_are_the_source_and_the_iterator_it_made() -> None:
    generator = tokens()
    assert stream_parts(GuardedStream(generator, None)) == [generator]  # one object, once
    iterable = Iterable()
    parts = stream_parts(GuardedStream(iterable, None))
    assert len(parts) == 2 and any(p is iterable for p in parts)
    (made,) = [p for p in parts if p is not iterable]
    assert type(made).__name__ == "async_generator"


async def test_close_records_streams_and_attachments_held_elsewhere() -> None:
    guard = make()
    watch = SessionWatch()
    guard.add_stream_hook(watch.on_stream)
    records: list[Any] = []
    guard.add_close_hook(lambda session: records.extend(watch.on_close(session)))
    session = guard.registry.open("http", "/")
    kept: list[str] = ["history"]  # also held by this test: an extra owner
    session.attach(kept)
    session.attach(["dies with the session"])
    iterable = Iterable()
    stream = GuardedStream(iterable, session)  # kept: it and the generator it made stay alive
    async for _ in stream:
        pass
    await guard.close_session(session, CloseReason.COMPLETED)
    kinds = sorted((r.kind, r.label) for r in records)
    assert kinds == [("attachment", "attachment[0]"), ("generator", "Iterable"),
                     ("generator", "Iterable"), ("session", "http"), ("stream", "Iterable")]
    (attachment,) = [r for r in records if r.kind == "attachment"]
    assert attachment.held is kept and attachment.alive()
    del kept
    assert not attachment.alive()  # only the record holds it now
    watch.release(records)
    assert watch.held_now == 0
    del stream, iterable
    assert [r.kind for r in records if r.alive()] == ["session"]  # held by this frame
