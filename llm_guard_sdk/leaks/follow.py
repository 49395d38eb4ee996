"""Test-side plumbing: follow every guard's sessions, and catch objects a ``__del__`` revived.

The follower hooks each guard once (through ``watch_guards``) and hands what a closing session
owned to the test check running at that moment, if any.

Resurrection defeats weak references: the cyclic GC clears the weak references to everything in
an unreachable cycle *before* it runs ``__del__`` methods, so when a ``__del__`` stores ``self``
somewhere (a pool, a pending-close list), the cycle lives on while every weak reference to it
already reads ``None``. :class:`DeathWatch` notes which tracked objects died inside a GC run; a
check then looks for those ids (with the same type) among live objects.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llm_guard_sdk.leaks.tracking import SessionWatch, Tracked, TrackRef

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard
    from llm_guard_sdk.session import Session
    from llm_guard_sdk.stream import GuardedStream


REVIVED = ("collected as part of a reference cycle, then revived by a __del__ method that "
           "stored it again; still alive")


class DeathWatch:
    """Remembers tracked objects whose weak references the cyclic GC cleared.

    Records made with ``on_death=deaths.died`` report here when their object dies; only deaths
    inside a GC run are kept (at most ``max_entries`` between two :meth:`revived` calls).
    """

    def __init__(self, max_entries: int = 10000) -> None:
        self.max_entries = max_entries
        self.died_in_gc: dict[int, Tracked] = {}
        self._collecting = False

    def _phase(self, phase: str, info: dict[str, int]) -> None:
        self._collecting = phase == "start"

    def start(self) -> None:
        """Observe GC runs (``gc.callbacks``)."""
        gc.callbacks.append(self._phase)

    def stop(self) -> None:
        """Stop observing GC runs."""
        if self._phase in gc.callbacks:
            gc.callbacks.remove(self._phase)

    def died(self, ref: TrackRef) -> None:
        """Weak reference callback: remember the object if a GC run freed it."""
        if self._collecting and len(self.died_in_gc) < self.max_entries:
            kind, cls, owner, label = ref.info
            self.died_in_gc[ref.key] = Tracked(kind, cls, owner, label)

    @property
    def pending(self) -> bool:
        """True when some tracked object died in a GC run since the last :meth:`revived`."""
        return bool(self.died_in_gc)

    def revived(self) -> list[tuple[Tracked, Any]]:
        """Objects that died in a GC run and live again; one heap walk, only if any died."""
        wanted, self.died_in_gc = self.died_in_gc, {}
        if not wanted:
            return []
        out = []
        for obj in gc.get_objects():
            record = wanted.get(id(obj))
            if record is not None and record.cls is type(obj):
                out.append((record, obj))
        return out


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
