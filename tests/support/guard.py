"""Helpers for tests of the guard and its actions: sources on a 1 MB scale and sessions to evict."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import GuardedStream, guard_stream
from tests.support.polling import until
from tests.support.sources import FakeSource

LIMIT = 1_000_000
# Defaults: warn 0.75, evict 0.85, shed 0.92, hysteresis 0.05 -> evict target 0.80.
NORMAL, WARN, EVICT, SHED = 100_000, 780_000, 900_000, 950_000
OLD = 1000.0  # seconds subtracted from created_at to make a session older than min_session_age


def fake_source(used: int = NORMAL, *, limit: int | None = LIMIT, name: str = "fake") -> FakeSource:
    """The one FakeSource, on the scale of this module's level constants."""
    return FakeSource(used, limit, name)


def make_guard(source: FakeSource | None = None, **overrides: Any) -> Guard:
    """A guard polling only ``source`` (a quiet one by default); sessions age 30 s to evict."""
    overrides.setdefault("min_session_age", 30)
    config = GuardConfig.defaults(sources=("process",), memory_limit="1Ti", **overrides)
    return Guard(config, sources=[source if source is not None else fake_source()])


def record_closes(sessions: list[Session], log: list[Session]) -> None:
    for session in sessions:
        session.on_close(log.append)


def idle(guard: Guard, size: int = 0, *, old: bool = True, tenant: str | None = None,
         priority: Priority = Priority.NORMAL) -> Session:
    """An idle WebSocket session accounting ``size`` attached bytes."""
    session = guard.registry.open("websocket", tenant=tenant, priority=priority)
    session.attached_bytes = size
    if old:
        session.created_at -= OLD
    return session


@dataclass
class Streaming:
    session: Session
    stream: GuardedStream[bytes]
    task: asyncio.Task[str]
    received: list[bytes] = field(default_factory=list)
    finalized: list[bool] = field(default_factory=list)


async def streaming(guard: Guard, size: int, *, kind: str = "http", tenant: str | None = None,
                    priority: Priority = Priority.NORMAL) -> Streaming:
    """A session with a real guarded stream, blocked waiting for its second chunk."""
    session = guard.registry.open(kind, tenant=tenant, priority=priority)
    session.created_at -= OLD
    finalized: list[bool] = []
    received: list[bytes] = []
    never = asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        try:
            yield b"x"
            await never.wait()
            yield b"never"
        finally:
            finalized.append(True)

    stream = guard_stream(source(), session=session)

    async def consume() -> str:
        async for chunk in stream:
            received.append(chunk)
        return "ended"

    task = asyncio.create_task(consume())
    await until(lambda: bool(received) and stream.waiting)
    stream.set_backend_bytes(size)
    return Streaming(session, stream, task, received, finalized)


async def cleanup(guard: Guard, *items: Streaming) -> None:
    for session in list(guard.registry):
        await guard.close_session(session, CloseReason.COMPLETED)
    for item in items:
        assert await asyncio.wait_for(item.task, 5) == "ended"


class FakeStream:
    """The smallest SessionStream: records the close it was asked for."""

    def __init__(self, name: str, bytes_out: int = 0) -> None:
        self.name = name
        self.bytes_out = bytes_out
        self.backend_bytes = 0
        self.declared_bytes = 0
        self.chunks = 0
        self.started_at = 0.0
        self.stuck_chunks = -1
        self.stuck_since = 0.0
        self.waiting = False
        self.closed_with: CloseReason | None = None

    async def request_close(self, reason: CloseReason) -> None:
        self.closed_with = reason


class FakeConnection:
    """The smallest SessionConnection: counts watch() calls."""

    def __init__(self) -> None:
        self.watched = 0

    async def close(self, reason: CloseReason) -> None:
        pass

    def watch(self) -> None:
        self.watched += 1
