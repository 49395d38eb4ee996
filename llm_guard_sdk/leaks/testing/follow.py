"""Test-side plumbing: follow every guard's sessions for the test check running now.

The follower hooks each guard once (through ``watch_guards``) and hands what a closing session
owned to the test check running at that moment, if any; deaths inside a GC run go to that
check's :class:`~llm_guard_sdk.leaks.runtime.tracking.DeathWatch`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llm_guard_sdk.leaks.runtime.tracking import DeathWatch, SessionWatch, Tracked, TrackRef

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard
    from llm_guard_sdk.session import Session
    from llm_guard_sdk.stream import GuardedStream


class Follower:
    """Hooks installed once on every guard; they report to the check running now, if any."""

    def __init__(self) -> None:
        self.deaths: DeathWatch | None = None  # the running check's
        self.watch = SessionWatch(max_held=1024, on_death=self._died)
        self.sink: Callable[[list[Tracked]], None] | None = None
        self._guards: weakref.WeakSet[Guard] = weakref.WeakSet()

    def attach(self, guard: Guard) -> None:
        """Hook ``guard`` (idempotent)."""
        if guard in self._guards:
            return
        self._guards.add(guard)
        guard.add_stream_hook(self.on_stream)
        guard.add_close_hook(self.on_close)

    def on_stream(self, session: Session, stream: GuardedStream[Any]) -> None:
        """Remember streams only while a check runs."""
        if self.sink is not None:
            self.watch.on_stream(session, stream)

    def _died(self, ref: TrackRef) -> None:
        deaths = self.deaths
        if deaths is not None:
            deaths.died(ref)

    def on_close(self, session: Session) -> None:
        """Hand what the session owned to the running check."""
        sink = self.sink
        if sink is None:
            self.watch.forget(session.id)
            return
        sink(self.watch.on_close(session))


_follower: Follower | None = None


def follower() -> Follower:
    """The process-wide follower, registered with ``watch_guards`` on first use."""
    global _follower
    if _follower is None:
        from llm_guard_sdk.guard import watch_guards

        _follower = Follower()
        watch_guards(_follower.attach)
    return _follower
