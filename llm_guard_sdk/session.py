"""One session per streaming HTTP request or WebSocket connection.

A session is the unit the guard accounts memory to and the unit it closes under pressure. Apps
hand their per-conversation state to it with :meth:`Session.attach`, so closing the session is what
frees that state instead of a closure or a global cache keeping it alive.
"""

# Somewhat over 300 lines: Session is the one interface every part talks to (streams, registry,
# ASGI edge, guard), and its held-bytes and traffic accounting belong next to its lifecycle.

from __future__ import annotations

import enum
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from llm_guard_sdk import hotpath
from llm_guard_sdk.priority import Priority

T = TypeVar("T")


class SessionState(enum.Enum):
    """Lifecycle states; only ``idle`` sessions are candidates for LRU eviction."""

    ACTIVE = "active"
    IDLE = "idle"
    CLOSING = "closing"
    CLOSED = "closed"


class CloseReason(enum.Enum):
    """Why a session ended; drives which counter moves and what the client is told."""

    COMPLETED = "completed"
    DISCONNECTED = "disconnected"
    EVICTED = "evicted"
    IDLE_TIMEOUT = "idle_timeout"
    TIMEOUT = "timeout"
    ERROR = "error"
    INBOUND_OVERFLOW = "inbound_overflow"  # the app left more inbound frames unread than allowed
    SEND_TIMEOUT = "send_timeout"  # a send to the client stalled past send_timeout: a dead peer
    PING_TIMEOUT = "ping_timeout"  # a chat client did not answer an application-level ping


def new_session_id() -> str:
    """Return an unguessable id (128 bits from the OS CSPRNG) safe to show to the client."""
    return "sess-" + secrets.token_urlsafe(16)


class SessionStream(Protocol):
    """A stream open on a session (``GuardedStream``), as the session and the actions see it."""

    name: str
    bytes_out: int
    backend_bytes: int
    declared_bytes: int
    chunks: int
    started_at: float
    stuck_chunks: int
    stuck_since: float

    @property
    def waiting(self) -> bool:  # noqa: D102
        ...

    async def request_close(self, reason: CloseReason) -> None:  # noqa: D102
        ...


class SessionTable(Protocol):
    """The table that indexes sessions (``SessionRegistry``), told when a session changes."""

    def attached(self, session: Session) -> None: ...  # noqa: D102
    def resize(self, session: Session) -> None: ...  # noqa: D102
    def stream_opened(self, session: Session, stream: SessionStream) -> None: ...  # noqa: D102
    def stream_closed(  # noqa: D102
        self, session: Session, stream: SessionStream, reason: CloseReason
    ) -> None: ...


class SessionConnection(Protocol):
    """The client connection behind a session (the ASGI edge binds one per request)."""

    async def close(self, reason: CloseReason) -> None:
        """The guard closed the session: end the connection the way the client understands."""

    def watch(self) -> None:
        """Start watching for the client going away (idempotent)."""


class Session:
    """Everything the guard knows about one connection.

    Apps read the counters and use :meth:`attach` and :meth:`on_close`. The rest of the public
    interface is for the SDK's own parts, so none of them reaches into the session's slots:
    streams add and remove themselves (:meth:`add_stream`, :meth:`remove_stream`) and report
    what they hold (:meth:`held_changed`), the ASGI edge binds the connection
    (:meth:`bind_connection`) and writes ``buffered_bytes``, the registry keeps ``state``,
    ``last_activity``, ``traffic_seen`` and ``bucket`` in step with its indexes (an active
    session's ``last_activity`` is the time of the first tick that saw its latest traffic:
    precise to ``sample_interval``, see ``SessionRegistry.note_activity``), the attachment
    sizer writes ``attached_bytes`` and ``attached_estimated``, and the guard runs the close
    sequence (:meth:`mark_closing`, :meth:`mark_closed`, :meth:`drop_attachments`,
    :meth:`drain_close_callbacks`).

    Two kinds of numbers, never mixed: **traffic** (``bytes_received``/``bytes_sent``, also
    named ``bytes_in``/``bytes_out``, and ``chunks_*``) only grows and says nothing about memory;
    **held bytes** (:attr:`held_bytes`) is what the session holds now and what closing it frees,
    so eviction and the size buckets use only that.
    """

    __slots__ = (
        "__weakref__", "_attachments", "_close_callbacks", "_connection", "_streams", "_table",
        "attached_bytes", "attached_estimated", "bucket", "buffered_bytes", "bytes_in",
        "chunks_in", "close_reason", "created_at", "id", "kind", "label", "last_activity",
        "out", "path", "priority", "state", "streams_total", "tenant", "traffic_seen",
    )

    def __init__(self, kind: str, path: str = "", *, label: str | None = None,
                 table: SessionTable | None = None, tenant: str = "default",
                 priority: Priority = Priority.NORMAL) -> None:
        now = time.monotonic()
        self.id = new_session_id()
        self.kind = kind
        self.path = path
        self.label = label
        # Fixed at open: the registry files the session under its tenant and priority class.
        self.tenant = tenant
        self.priority = priority
        self.created_at = now
        self.last_activity = now
        self.state = SessionState.ACTIVE
        self.close_reason: CloseReason | None = None
        self.bytes_in = 0
        self.chunks_in = 0
        # Outbound traffic, counted on the hot path (compiled where built: no int per chunk).
        self.out: hotpath.Traffic = hotpath.new_traffic()
        self.streams_total = 0
        self.traffic_seen = 0  # chunks in + out when the registry last noted activity
        self.attached_bytes = 0  # deep size of the attachments, as last measured
        self.attached_estimated = False  # that size was estimated from a sample
        self.buffered_bytes = 0  # bytes the guard itself buffers (read-ahead, inbound queue)
        self.bucket = -1  # the registry's size bucket holding this session; -1 when in none
        # An empty tuple until the first item: most sessions attach nothing and register no
        # callback, and an idle WebSocket has no stream; three empty lists cost 168 B each time.
        self._attachments: list[Any] | tuple[()] = ()
        self._streams: list[SessionStream] | tuple[()] = ()
        self._close_callbacks: list[Callable[[Session], object]] | tuple[()] = ()
        self._table = table
        self._connection: SessionConnection | None = None

    @property
    def held_bytes(self) -> int:
        """Bytes closing this session frees, as far as the guard can know them.

        Measured attachments + what the guard buffers + per stream: the backend's bytes (KV
        cache) and what the app declared. O(open streams), usually one.
        """
        held = self.attached_bytes + self.buffered_bytes
        for stream in self._streams:
            held += stream.backend_bytes + stream.declared_bytes
        return held

    @property
    def accounted_bytes(self) -> int:
        """The former name of :attr:`held_bytes` (kept for compatibility)."""
        return self.held_bytes

    @property
    def backend_bytes(self) -> int:
        """The backend's bytes (e.g. vLLM KV cache) of the open streams, summed."""
        return sum(stream.backend_bytes for stream in self._streams)

    @property
    def declared_bytes(self) -> int:
        """Bytes the open streams declared they hold (``declare_held``), summed."""
        return sum(stream.declared_bytes for stream in self._streams)

    @property
    def bytes_received(self) -> int:
        """Traffic: body/frame bytes received from the client (also ``bytes_in``)."""
        return self.bytes_in

    @property
    def bytes_sent(self) -> int:
        """Traffic: body/frame bytes sent to the client (also ``bytes_out``)."""
        return self.out.bytes

    # Traffic: body/frame bytes and chunks sent to the client, kept in the pair ``out``.
    bytes_out = hotpath.TrafficCounter("out", "bytes")
    chunks_out = hotpath.TrafficCounter("out", "chunks")

    @property
    def age(self) -> float:
        """Seconds since the session opened (monotonic clock)."""
        return time.monotonic() - self.created_at

    @property
    def idle_for(self) -> float:
        """Seconds since the last message in either direction.

        Precise to ``sample_interval`` while the session is active: the hot path reads no clock
        per chunk, the guard's tick notes that traffic moved (``SessionRegistry.note_activity``).
        """
        return time.monotonic() - self.last_activity

    @property
    def closed(self) -> bool:
        """True once the session is closing or closed; streams must stop producing."""
        return self.state in (SessionState.CLOSING, SessionState.CLOSED)

    @property
    def streams(self) -> tuple[SessionStream, ...]:
        """Guarded streams currently open on this session."""
        return tuple(self._streams)

    @property
    def stream_count(self) -> int:
        """How many guarded streams are open on this session (no copy, unlike ``streams``)."""
        return len(self._streams)

    @property
    def connection(self) -> SessionConnection | None:
        """The client connection bound by the ASGI edge, None outside the middleware."""
        return self._connection

    @property
    def attachments(self) -> tuple[Any, ...]:
        """Objects the app attached; dropped (and so freed) when the session closes."""
        return tuple(self._attachments)

    def attach(self, obj: T) -> T:
        """Make the session own ``obj`` (e.g. conversation history) so closing it frees ``obj``.

        Returns ``obj`` so it can be used inline: ``history = session.attach([])``.
        """
        if isinstance(self._attachments, list):
            self._attachments.append(obj)
        else:
            self._attachments = [obj]
        if self._table is not None and len(self._attachments) == 1:
            self._table.attached(self)
        return obj

    def detach(self, obj: object) -> None:
        """Stop owning ``obj``; a no-op when it was not attached."""
        self._attachments = [o for o in self._attachments if o is not obj] or ()

    def on_close(self, callback: Callable[[Session], object]) -> None:
        """Run ``callback(session)`` once when the session closes (e.g. abort a backend request).

        Callbacks run last in the guard's close sequence, after the session has dropped what it
        owns; registered on a closed session, the callback runs at once.
        """
        if self.state is SessionState.CLOSED:
            callback(self)
        elif isinstance(self._close_callbacks, list):
            self._close_callbacks.append(callback)
        else:
            self._close_callbacks = [callback]

    # -- streams (called by GuardedStream) ------------------------------------------------------

    def add_stream(self, stream: SessionStream) -> bool:
        """A guarded stream opened on this session: index it, and watch the client from now on.

        Disconnect watching starts here, even before the response starts: the handler may wait
        for the first token before it sends headers. On a session already closing or closed the
        stream is counted as opened and ended at once (so ``streams.open`` stays exact even if
        it is never iterated) and not added: returns False.
        """
        if self.closed:
            if self._table is not None:
                self._table.stream_opened(self, stream)
                self._table.stream_closed(
                    self, stream, self.close_reason or CloseReason.DISCONNECTED)
            return False
        if isinstance(self._streams, list):
            self._streams.append(stream)
        else:
            self._streams = [stream]
        if self._table is not None:
            self._table.stream_opened(self, stream)
        if self._connection is not None:
            self._connection.watch()
        return True

    def remove_stream(self, stream: SessionStream, reason: CloseReason) -> bool:
        """A guarded stream ended: drop what it held and tell the registry why it ended.

        Reported once: a stream that is not open here (never added, or already removed) changes
        no counter, and False is returned.
        """
        streams = self._streams
        if not isinstance(streams, list) or stream not in streams:
            return False
        streams.remove(stream)
        if self._table is not None:
            self._table.stream_closed(self, stream, reason)
        return True

    def held_changed(self) -> None:
        """Held bytes changed: re-bucket only when their power of two changed.

        Streams call it when they declare bytes or the backend reports KV bytes; whoever
        writes ``buffered_bytes`` or ``attached_bytes`` may call it too.
        """
        if self._table is not None and self.held_bytes.bit_length() != self.bucket:
            self._table.resize(self)

    # -- connection (called by the ASGI edge) ---------------------------------------------------

    def bind_connection(self, connection: SessionConnection) -> None:
        """Bind the client connection the guard ends when it closes this session."""
        self._connection = connection

    # -- close sequence (called by the guard and the registry) ----------------------------------

    def mark_closing(self, reason: CloseReason) -> bool:
        """Enter ``closing`` with ``reason``; False when already closing or closed (close once)."""
        if self.closed:
            return False
        self.state = SessionState.CLOSING
        self.close_reason = reason
        return True

    def mark_closed(self) -> bool:
        """Enter ``closed`` and unbind the connection; False when it already was closed."""
        if self.state is SessionState.CLOSED:
            return False
        self.state = SessionState.CLOSED
        self._connection = None
        return True

    def drop_attachments(self) -> None:
        """Stop owning every attachment, so closing the session frees them."""
        self._attachments = ()

    def drain_close_callbacks(self) -> list[Callable[[Session], object]]:
        """Take the callbacks registered with :meth:`on_close`, for the guard to run once."""
        callbacks, self._close_callbacks = self._close_callbacks, ()
        return list(callbacks)

    def summary(self) -> dict[str, Any]:
        """A JSON-safe description without any prompt or completion text."""
        held = self.held_bytes
        return {
            "id": self.id,
            "kind": self.kind,
            "tenant": self.tenant,
            "priority": self.priority.label,
            "state": self.state.value,
            "age_seconds": round(self.age, 3),
            "idle_seconds": round(self.idle_for, 3),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "bytes_received": self.bytes_in,
            "bytes_sent": self.bytes_out,
            "chunks_in": self.chunks_in,
            "chunks_out": self.chunks_out,
            "streams": len(self._streams),
            "held_bytes": held,
            "accounted_bytes": held,
            "attached_bytes": self.attached_bytes,
            "buffered_bytes": self.buffered_bytes,
            "backend_bytes": self.backend_bytes,
            "declared_bytes": self.declared_bytes,
            "estimated": self.attached_estimated,
        }

    def __repr__(self) -> str:
        return f"<Session {self.id} {self.kind} {self.state.value} held={self.held_bytes}B>"
