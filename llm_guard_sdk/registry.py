"""The session table, indexed so that choosing eviction victims never scans every session.

Two indexes are kept up to date as sessions change, each in O(1) per change, one of each per
priority class (:class:`~llm_guard_sdk.priority.Priority`, three classes: the evictor drains a
lower class before it looks at a higher one, without sorting):

* an LRU of **idle** sessions (no open stream), oldest activity first: the first victims;
* **size buckets** of sessions with open streams, keyed by the bit length of their held bytes
  (:attr:`Session.held_bytes`, never traffic; powers of two, as Envoy's
  ``reset_high_memory_stream`` does): the largest bucket is reset first when closing idle
  sessions was not enough.

Active sessions (HTTP requests, WebSockets with a stream open) are also kept in a dict of their
own, so that the tick can note their traffic without walking the idle ones: their
``last_activity`` is precise to the tick (:meth:`SessionRegistry.note_activity`).

Sessions per tenant are counted in the :class:`~llm_guard_sdk.tenants.book.TenantBook` as they
open and are forgotten.
"""

# Somewhat over 300 lines: the table's counters (closes by reason, streams by outcome, peak held
# bytes) and the active sessions' activity are kept where the indexes change, next to them.

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from llm_guard_sdk.priority import Priority
from llm_guard_sdk.session import CloseReason, Session, SessionState, SessionStream
from llm_guard_sdk.tenants.book import TenantBook

_BUCKETS = 64
EVICTION_REASONS = frozenset({CloseReason.EVICTED, CloseReason.IDLE_TIMEOUT})
"""Close reasons that count as evictions (the guard closed a healthy session to free memory)."""


@dataclass(slots=True)
class Counters:
    """Monotonic totals, exported as ``*_total`` in status and metrics."""

    opened_total: int = 0
    closed_total: int = 0
    evicted_total: int = 0
    shed_total: int = 0
    streams_opened_total: int = 0
    streams_completed_total: int = 0
    streams_aborted_total: int = 0
    streams_disconnected_total: int = 0
    inbound_overflow_total: int = 0
    send_timeout_total: int = 0  # dead peers: a send stalled past send_timeout
    ping_timeout_total: int = 0  # dead peers: no answer to the chat's ping
    evicted_by_reason: dict[str, int] = field(default_factory=dict)
    closed_by_reason: dict[str, int] = field(default_factory=dict)  # every close, by reason
    streams_by_outcome: dict[str, int] = field(default_factory=dict)  # ended streams, by reason
    # Traffic of the sessions already closed; status adds the live sessions' counters.
    closed_bytes_sent: int = 0
    closed_bytes_received: int = 0


class SessionRegistry:
    """Owns every live :class:`Session` and the indexes the evictor walks."""

    def __init__(
        self,
        max_sessions: int,
        stream_hooks: list[Callable[[Session, Any], None]] | None = None,
        *,
        tenants: TenantBook | None = None,
        default_tenant: str = "default",
    ) -> None:
        self.max_sessions = max_sessions
        self.counters = Counters()
        self.tenants = tenants if tenants is not None else TenantBook()
        """Per-tenant counts and caps (the guard's, built from the settings)."""
        self.default_tenant = default_tenant
        self._sessions: dict[str, Session] = {}
        # One idle LRU and one bucket list per priority class, indexed by Priority.
        self._idle: tuple[OrderedDict[str, Session], ...] = tuple(
            OrderedDict() for _ in Priority)
        self._buckets: tuple[list[dict[str, Session]], ...] = tuple(
            [{} for _ in range(_BUCKETS)] for _ in Priority)
        # Not idle and not closing: the sessions whose traffic the tick notes.
        self._active: dict[str, Session] = {}
        self._streams_open = 0
        self._with_attachments: dict[str, Session] = {}
        # Largest held bytes seen per session, noted when they change power of two (resize):
        # the metrics' held-bytes histogram observes it when the session closes.
        self._peak_held: dict[str, int] = {}
        self.stream_hooks = stream_hooks if stream_hooks is not None else []
        """Called with ``(session, stream)`` when a stream opens (the guard's stream hooks)."""

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def get(self, session_id: str) -> Session | None:
        """Look a session up by id."""
        return self._sessions.get(session_id)

    @property
    def streams_open(self) -> int:
        """Guarded streams currently open across all sessions."""
        return self._streams_open

    @property
    def idle_count(self) -> int:
        """Sessions with no open stream (WebSocket connections between prompts)."""
        return sum(len(lru) for lru in self._idle)

    @property
    def full(self) -> bool:
        """True when admitting one more session would exceed ``max_sessions``."""
        return len(self._sessions) >= self.max_sessions

    def open(self, kind: str, path: str = "", *, label: str | None = None,
             tenant: str | None = None, priority: Priority = Priority.NORMAL) -> Session:
        """Register a new session; callers check :attr:`full` first and shed instead.

        ``tenant`` defaults to the default tenant; ``tenant`` and ``priority`` are fixed for
        the session's life (they choose its indexes).
        """
        session = Session(kind, path, label=label, table=self,
                          tenant=self.default_tenant if tenant is None else tenant,
                          priority=priority)
        self._sessions[session.id] = session
        self.counters.opened_total += 1
        self.tenants.opened(session.tenant)
        if kind == "websocket":
            self._set_idle(session)
        else:
            self._active[session.id] = session
        return session

    def attached(self, session: Session) -> None:
        """The session now owns attachments: the sampler measures their size from now on."""
        if not session.closed:
            self._with_attachments[session.id] = session

    def sessions_with_attachments(self) -> list[Session]:
        """Sessions whose attached objects the sampler should size."""
        return list(self._with_attachments.values())

    def touch(self, session: Session) -> None:
        """Record activity now; keeps the idle LRU ordered by last activity.

        For idle sessions (whose order the evictor relies on) and rare events; the per-chunk
        path of an active session only counts, and :meth:`note_activity` turns the count into
        a time at the next tick.
        """
        session.last_activity = time.monotonic()
        if session.state is SessionState.IDLE:
            self._idle[session.priority].move_to_end(session.id)

    def note_activity(self, now: float | None = None) -> None:
        """Set ``last_activity`` to ``now`` for each active session with traffic since last time.

        Called from every tick, so an active session's ``last_activity`` (status
        ``idle_seconds``) is precise to ``sample_interval``: the hot path reads no clock per
        chunk (``time.monotonic()`` cost ~140 ns, a seventh of the guard's per-chunk cost).
        Idle sessions are not walked: their activity is rare and recorded by :meth:`touch`.
        """
        now = time.monotonic() if now is None else now
        for session in self._active.values():
            traffic = session.chunks_out + session.chunks_in
            if traffic != session.traffic_seen:
                session.traffic_seen = traffic
                session.last_activity = now

    def resize(self, session: Session) -> None:
        """Move a streaming session to the bucket of its current held bytes."""
        self._unbucket(session)
        held = session.held_bytes
        if held > self._peak_held.get(session.id, 0) and not session.closed:
            self._peak_held[session.id] = held
        if session.stream_count and not session.closed:
            index = min(held.bit_length(), _BUCKETS - 1)
            self._buckets[session.priority][index][session.id] = session
            session.bucket = index

    def stream_opened(self, session: Session, stream: SessionStream) -> None:
        """A stream started: the session is active and joins the size buckets."""
        self._streams_open += 1
        self.counters.streams_opened_total += 1
        session.streams_total += 1
        for hook in self.stream_hooks:
            hook(session, stream)
        if session.state is SessionState.IDLE:
            self._idle[session.priority].pop(session.id, None)
            session.state = SessionState.ACTIVE
            self._active[session.id] = session
        self.resize(session)

    def stream_closed(
        self, session: Session, stream: SessionStream, reason: CloseReason
    ) -> None:
        """A stream ended: count why, and let a WebSocket session fall back to idle."""
        self._streams_open -= 1
        outcomes = self.counters.streams_by_outcome
        outcomes[reason.value] = outcomes.get(reason.value, 0) + 1
        if reason is CloseReason.COMPLETED:
            self.counters.streams_completed_total += 1
        elif reason is CloseReason.DISCONNECTED:
            self.counters.streams_disconnected_total += 1
        else:
            self.counters.streams_aborted_total += 1
        if session.closed:
            return
        self.resize(session)
        if not session.stream_count and session.kind == "websocket":
            self._set_idle(session)
        session.last_activity = time.monotonic()

    def start_closing(self, session: Session, reason: CloseReason) -> bool:
        """Mark a session closing and take it out of the eviction indexes.

        Returns False when it already was closing or closed, so the guard closes it once.
        """
        if not session.mark_closing(reason):
            return False
        self._idle[session.priority].pop(session.id, None)
        self._active.pop(session.id, None)
        self._unbucket(session)
        closes = self.counters.closed_by_reason
        closes[reason.value] = closes.get(reason.value, 0) + 1
        if reason in EVICTION_REASONS:
            c = self.counters
            c.evicted_total += 1
            c.evicted_by_reason[reason.value] = c.evicted_by_reason.get(reason.value, 0) + 1
        elif reason is CloseReason.INBOUND_OVERFLOW:
            self.counters.inbound_overflow_total += 1
        elif reason is CloseReason.SEND_TIMEOUT:
            self.counters.send_timeout_total += 1
        elif reason is CloseReason.PING_TIMEOUT:
            self.counters.ping_timeout_total += 1
        return True

    def forget(self, session: Session) -> None:
        """Mark a session closed and drop it from the table; counted once."""
        if not session.mark_closed():
            return
        self._with_attachments.pop(session.id, None)
        self._active.pop(session.id, None)
        self._peak_held.pop(session.id, None)
        if self._sessions.pop(session.id, None) is not None:
            self.tenants.closed(session)
            c = self.counters
            c.closed_total += 1
            c.closed_bytes_sent += session.bytes_sent
            c.closed_bytes_received += session.bytes_received

    def peak_held_bytes(self, session: Session) -> int:
        """The most the session held as far as the registry saw (at each power-of-two change).

        Known until the session is forgotten; at least its held bytes now.
        """
        return max(self._peak_held.get(session.id, 0), session.held_bytes)

    def idle_lru(self, priority: Priority | None = None) -> Iterator[Session]:
        """Idle sessions of one class (all classes, lowest first), least recently active first."""
        classes = Priority if priority is None else (priority,)
        return iter([s for p in classes for s in self._idle[p].values()])

    def expired_idle(self, idle_timeout: float) -> list[Session]:
        """Idle sessions past ``idle_timeout``; per class, stops at the first fresh one (LRU)."""
        now = time.monotonic()
        expired: list[Session] = []
        for lru in self._idle:
            for session in lru.values():
                if now - session.last_activity < idle_timeout:
                    break
                expired.append(session)
        return expired

    def largest_streams(self, priority: Priority | None = None) -> Iterator[Session]:
        """Streaming sessions from the largest size bucket down, largest first in a bucket.

        Of one class, or of all classes merged by bucket (the largest of any class first).
        """
        classes = Priority if priority is None else (priority,)
        for index in reversed(range(_BUCKETS)):
            bucket = [s for p in classes for s in self._buckets[p][index].values()]
            if bucket:
                yield from sorted(bucket, key=lambda s: s.held_bytes, reverse=True)

    def streaming_sessions(self) -> list[Session]:
        """Every session with an open stream, in no particular order.

        For the tick's visit of every stream: no sort, unlike :meth:`largest_streams`.
        """
        return [s for buckets in self._buckets for bucket in buckets if bucket
                for s in bucket.values()]

    def summary(self) -> dict[str, int]:
        """Counts for status: active, idle and the totals."""
        c = self.counters
        idle = self.idle_count
        return {
            "active": len(self._sessions) - idle,
            "idle": idle,
            "opened_total": c.opened_total,
            "closed_total": c.closed_total,
            "evicted_total": c.evicted_total,
            "shed_total": c.shed_total,
            "inbound_overflow_total": c.inbound_overflow_total,
            "send_timeout_total": c.send_timeout_total,
            "ping_timeout_total": c.ping_timeout_total,
        }

    def accounting(self) -> dict[str, dict[str, int]]:
        """Held bytes of the live sessions and traffic of all sessions, for status.

        One pass over the sessions: status is not the request path.
        """
        held = {"total_bytes": 0, "attached_bytes": 0, "buffered_bytes": 0, "backend_bytes": 0,
                "declared_bytes": 0, "estimated_sessions": 0}
        sent, received = self.counters.closed_bytes_sent, self.counters.closed_bytes_received
        for session in self._sessions.values():
            held["total_bytes"] += session.held_bytes
            held["attached_bytes"] += session.attached_bytes
            held["buffered_bytes"] += session.buffered_bytes
            held["backend_bytes"] += session.backend_bytes
            held["declared_bytes"] += session.declared_bytes
            held["estimated_sessions"] += session.attached_estimated
            sent += session.bytes_sent
            received += session.bytes_received
        return {"held": held,
                "traffic": {"bytes_sent_total": sent, "bytes_received_total": received}}

    def _set_idle(self, session: Session) -> None:
        session.state = SessionState.IDLE
        self._active.pop(session.id, None)
        lru = self._idle[session.priority]
        lru[session.id] = session
        lru.move_to_end(session.id)

    def _unbucket(self, session: Session) -> None:
        if session.bucket >= 0:
            self._buckets[session.priority][session.bucket].pop(session.id, None)
            session.bucket = -1
