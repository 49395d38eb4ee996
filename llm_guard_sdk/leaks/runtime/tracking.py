"""What should die when a session closes, held so that holding it never keeps it alive.

Weak references are the tool, but dicts, lists, strings and ``__slots__`` classes without
``__weakref__`` cannot be weakly referenced, and ``session.attach([])`` (a history list) is the
commonest attachment. Those are checked by reference count instead: at close the session's list
is known to hold them, so any further reference is another owner (a cache, a closure, a task).
Only then is the object held, strongly and for one re-check; otherwise it dies with its owner.

Resurrection defeats weak references: the cyclic GC clears the weak references to everything in
an unreachable cycle *before* it runs ``__del__`` methods, so when a ``__del__`` stores ``self``
somewhere (a pool, a pending-close list), the cycle lives on while every weak reference to it
already reads ``None``. :class:`DeathWatch` notes which tracked objects died inside a GC run; the
sweeper and the test check then look for those ids (with the same type) among live objects.

Only public surfaces of the core are used: ``Session.streams``/``attachments`` and a stream's
``source`` (see :func:`stream_parts`).
"""

from __future__ import annotations

import gc
import sys
import types
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llm_guard_sdk.leaks.runtime.introspect import class_name, is_any

if TYPE_CHECKING:
    from llm_guard_sdk.session import Session, SessionStream

# Immortal objects (3.12+) and interned constants report absurd counts; never "leaks".
_IMMORTAL = 1 << 29
# References the holder itself adds: its attribute plus getrefcount's own argument.
_HELD_BASE = 2
_MAX_STREAMS_PER_SESSION = 32
# Immutable values are shared freely (constants, interned strings, cached tuples): another
# reference to one says nothing about a leak, so they are never held for a check.
_SHARED_VALUES = (str, bytes, int, float, complex, bool, type(None), tuple, frozenset, range,
                  type, types.ModuleType)


def stream_parts(stream: object) -> list[object]:
    """What a guarded stream drives and that should die with it: its source and iterator.

    Both are public on ``GuardedStream`` (``source``, and ``iterator``, which is the same object
    for an async generator); other stream types contribute what they expose of the two.
    """
    parts: list[object] = []
    for name in ("source", "iterator"):
        obj = getattr(stream, name, None)
        if obj is not None and all(obj is not p for p in parts):
            parts.append(obj)
    return parts


class TrackRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference that remembers, for its death callback, which object it tracked."""

    __slots__ = ("info", "key")

    def __init__(self, obj: object, callback: Callable[[TrackRef], None], /, *,
                 info: tuple[str, type, str, str]) -> None:
        super().__init__(obj, callback)  # type: ignore[call-arg]  # typeshed: only __new__
        self.key = id(obj)
        self.info = info  # kind, class, owner, label: no reference back to any record


DeathCallback = Callable[[TrackRef], None]


@dataclass(slots=True, eq=False)
class Tracked:
    """One object that should die: by weak reference, or held with a reference-count check."""

    kind: str  # session | stream | generator | attachment | tracked | asyncgen | revived
    cls: type
    owner: str  # session id, or the test that tracked it
    label: str  # where it came from (stream name, attachment index); never content
    ref: weakref.ref[Any] | None = None
    held: Any = None
    since: float = 0.0  # monotonic time of the owner's close (sweeper)
    name: str = ""  # display name when the class alone says too little

    @property
    def type_name(self) -> str:
        """``module.Qualname`` of the object's class (computed only for reports)."""
        return self.name or class_name(self.cls)

    def get(self) -> Any:
        """The object if it is still alive (for held objects: if anyone but us holds it)."""
        if self.ref is not None:
            return self.ref()
        return self.held if self.alive() else None

    def alive(self) -> bool:
        """True while the object exists (held objects: while someone besides us holds it)."""
        if self.ref is not None:
            return self.ref() is not None
        held = self.held
        if held is None:
            return False
        del held  # the local would count as one more owner
        count = sys.getrefcount(self.held)
        return _HELD_BASE < count < _IMMORTAL

    def release(self) -> None:
        """Drop a strongly held object (after its last check)."""
        self.held = None

    def describe(self) -> dict[str, str]:
        """The JSON-safe identity of this record (no object content)."""
        return {"kind": self.kind, "type": self.type_name, "owner": self.owner,
                "label": self.label}


def weak(obj: object, kind: str, owner: str, label: str = "",
         on_death: DeathCallback | None = None) -> Tracked | None:
    """Track ``obj`` by weak reference, or None when it cannot be weakly referenced.

    ``on_death`` is called with the reference when the object dies (see ``DeathWatch``).
    """
    cls = type(obj)
    try:
        ref = weakref.ref(obj) if on_death is None else TrackRef(
            obj, on_death, info=(kind, cls, owner, label))
    except TypeError:
        return None
    return Tracked(kind, cls, owner, label, ref=ref)


def held(obj: object, kind: str, owner: str, label: str = "") -> Tracked:
    """Track ``obj`` by holding it; :meth:`Tracked.alive` then means "someone else holds it"."""
    return Tracked(kind, type(obj), owner, label, held=obj)


def extra_owners(obj: object, known: int) -> int:
    """References to ``obj`` beyond ``known`` ones the caller can account for (plus the call's)."""
    count = sys.getrefcount(obj) - 1  # the argument of getrefcount itself
    return 0 if count >= _IMMORTAL else max(0, count - 1 - known)  # minus our parameter


class SessionWatch:
    """Collects, per session, what should die once it closes; shared by sweeper and plugin.

    Streams are recorded when they open, because by the time the session closes a finished
    stream has already left ``session.streams``. At close the session, its streams, their
    source iterators and its attachments become :class:`Tracked` records.
    """

    def __init__(self, max_held: int = 256, on_death: DeathCallback | None = None) -> None:
        self.max_held = max_held
        self.on_death = on_death
        self.held_now = 0
        self.untrackable_total = 0
        # session id -> [(stream name, [(kind, weak reference)])] for streams seen opening
        self._streams: dict[str, list[tuple[str, list[tuple[str, weakref.ref[Any]]]]]] = {}

    def on_stream(self, session: Session, stream: SessionStream) -> None:
        """Stream hook: remember the stream and its source (weakly) until the session closes.

        The source is recorded now, while the stream still refers to it: a finished stream
        may be gone by close time while an app keeps its generator.
        """
        refs = self._streams.get(session.id)
        if refs is None:
            refs = self._streams[session.id] = []
        elif len(refs) >= _MAX_STREAMS_PER_SESSION:  # long WebSocket sessions: drop dead ones
            refs[:] = [r for r in refs if any(ref() is not None for _, ref in r[1])]
            del refs[:-_MAX_STREAMS_PER_SESSION + 1]
        entry: list[tuple[str, weakref.ref[Any]]] = [("stream", weakref.ref(stream))]
        for obj in stream_parts(stream):
            try:  # noqa: SIM105 - per stream on the request path; suppress() costs more
                entry.append(("generator", weakref.ref(obj)))
            except TypeError:  # an iterator without weak reference support: not tracked
                pass
        refs.append((stream.name, entry))

    def forget(self, session_id: str) -> None:
        """Drop stream records of a session that will not be tracked."""
        self._streams.pop(session_id, None)

    def on_close(self, session: Session) -> list[Tracked]:
        """Close hook: records for the session and everything it owned."""
        owner = session.id
        out: list[Tracked] = []
        seen: set[int] = {id(session)}
        on_death = self.on_death
        self._add(out, weak(session, "session", owner, session.kind, on_death))
        for stream in session.streams:  # still open: it may predate the hook
            self.on_stream(session, stream)
        for name, entry in self._streams.pop(owner, ()):
            for kind, ref in entry:
                obj = ref()
                if obj is not None and id(obj) not in seen:
                    seen.add(id(obj))
                    self._add(out, weak(obj, kind, owner, name, on_death))
                del obj
        # Our own list, whatever the property returns (a fresh tuple is dropped right here).
        self._attachments(out, seen, owner, list(session.attachments))
        return out

    def _attachments(self, out: list[Tracked], seen: set[int], owner: str,
                     attachments: list[Any]) -> None:
        """Records for ``attachments``, our copy of the session's (it still holds them too)."""
        for index in range(len(attachments)):  # not enumerate: its reused tuple holds obj
            obj = attachments[index]
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            label = f"attachment[{index}]"
            record = None if is_any(obj, _SHARED_VALUES) else weak(
                obj, "attachment", owner, label, self.on_death)
            if record is not None:
                out.append(record)
                continue
            # Known owners: the session's store and our copy (once per occurrence each) and
            # our loop variable.
            known = 2 * sum(1 for o in attachments if o is obj) + 1
            if extra_owners(obj, known) == 0:
                continue  # nobody else holds it: it dies with the session
            if is_any(obj, _SHARED_VALUES) or self.held_now >= self.max_held:
                self.untrackable_total += 1
                continue
            self.held_now += 1
            out.append(held(obj, "attachment", owner, label))

    def release(self, records: Iterable[Tracked]) -> None:
        """Forget strongly held records after their last check."""
        for record in records:
            if record.ref is None and record.held is not None:
                record.release()
                self.held_now -= 1

    @staticmethod
    def _add(out: list[Tracked], record: Tracked | None) -> None:
        if record is not None:
            out.append(record)


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
