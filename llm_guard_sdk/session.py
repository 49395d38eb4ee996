"""One session per streaming HTTP request or WebSocket connection.

A session is the unit the guard accounts memory to and the unit it closes under pressure. Apps
hand their per-conversation state to it with :meth:`Session.attach`, so closing the session is what
frees that state instead of a closure or a global cache keeping it alive.
"""

from __future__ import annotations

import contextlib
import enum
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

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


def new_session_id() -> str:
    """Return an unguessable id (128 bits from the OS CSPRNG) safe to show to the client."""
    return "sess-" + secrets.token_urlsafe(16)


class SessionStream(Protocol):
    """A stream open on a session (``GuardedStream``), as the session and the actions see it."""

    name: str
    bytes_out: int
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
    streams add and remove themselves (:meth:`add_stream`, :meth:`remove_stream`,
    :meth:`add_stream_bytes`), the ASGI edge binds the connection (:meth:`bind_connection`), the
    registry keeps ``state``, ``last_activity`` and ``bucket`` in step with its indexes, and the
    guard runs the close sequence (:meth:`mark_closing`, :meth:`mark_closed`,
    :meth:`drop_attachments`, :meth:`drain_close_callbacks`).
    """

    __slots__ = (
        "__weakref__", "_attachments", "_close_callbacks", "_connection", "_streams", "_table",
        "attached_bytes", "backend_bytes", "bucket", "buffered_bytes", "bytes_in", "bytes_out",
        "chunks_in", "chunks_out", "close_reason", "created_at", "id", "kind", "label",
        "last_activity", "path", "state", "stream_bytes", "streams_total",
    )

    def __init__(self, kind: str, path: str = "", *, label: str | None = None,
                 table: SessionTable | None = None) -> None:
        now = time.monotonic()
        self.id = new_session_id()
        self.kind = kind
        self.path = path
        self.label = label
        self.created_at = now
        self.last_activity = now
        self.state = SessionState.ACTIVE
        self.close_reason: CloseReason | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.chunks_in = 0
        self.chunks_out = 0
        self.stream_bytes = 0
        self.streams_total = 0
        self.attached_bytes = 0
        self.backend_bytes = 0
        self.buffered_bytes = 0  # inbound bytes the guard holds for the app (read-ahead, queue)
        self.bucket = -1  # the registry's size bucket holding this session; -1 when in none
        self._attachments: list[Any] = []
        self._streams: list[SessionStream] = []
        self._close_callbacks: list[Callable[[Session], object]] = []
        self._table = table
        self._connection: SessionConnection | None = None

    @property
    def accounted_bytes(self) -> int:
        """Bytes this session is believed to hold: stream buffers, attached state, backend (KV)."""
        return self.stream_bytes + self.attached_bytes + self.backend_bytes

    @property
    def age(self) -> float:
        """Seconds since the session opened (monotonic clock)."""
        return time.monotonic() - self.created_at

    @property
    def idle_for(self) -> float:
        """Seconds since the last message in either direction."""
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
        self._attachments.append(obj)
        if self._table is not None and len(self._attachments) == 1:
            self._table.attached(self)
        return obj

    def detach(self, obj: object) -> None:
        """Stop owning ``obj``; a no-op when it was not attached."""
        self._attachments = [o for o in self._attachments if o is not obj]

    def on_close(self, callback: Callable[[Session], object]) -> None:
        """Run ``callback(session)`` once when the session closes (e.g. abort a backend request).

        Callbacks run last in the guard's close sequence, after the session has dropped what it
        owns; registered on a closed session, the callback runs at once.
        """
        if self.state is SessionState.CLOSED:
            callback(self)
        else:
            self._close_callbacks.append(callback)

    # -- streams (called by GuardedStream) ------------------------------------------------------

    def add_stream(self, stream: SessionStream) -> None:
        """A guarded stream opened on this session: index it, and watch the client from now on.

        Disconnect watching starts here, even before the response starts: the handler may wait
        for the first token before it sends headers.
        """
        self._streams.append(stream)
        if self._table is not None:
            self._table.stream_opened(self, stream)
        if self._connection is not None:
            self._connection.watch()

    def remove_stream(self, stream: SessionStream, reason: CloseReason) -> None:
        """A guarded stream ended: release its bytes and tell the registry why it ended."""
        self.stream_bytes = max(0, self.stream_bytes - stream.bytes_out)
        with contextlib.suppress(ValueError):  # already removed: still report the close
            self._streams.remove(stream)
        if self._table is not None:
            self._table.stream_closed(self, stream, reason)

    def add_stream_bytes(self, size: int) -> None:
        """Account ``size`` more streamed bytes; re-bucket only when the power of two changed.

        On the hot path (once per sized chunk): attribute updates and one comparison.
        """
        total = self.stream_bytes + size
        self.stream_bytes = total
        total += self.attached_bytes + self.backend_bytes
        if total.bit_length() != self.bucket and self._table is not None:
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
        self._attachments.clear()

    def drain_close_callbacks(self) -> list[Callable[[Session], object]]:
        """Take the callbacks registered with :meth:`on_close`, for the guard to run once."""
        callbacks, self._close_callbacks = self._close_callbacks, []
        return callbacks

    def summary(self) -> dict[str, Any]:
        """A JSON-safe description without any prompt or completion text."""
        return {
            "id": self.id,
            "kind": self.kind,
            "state": self.state.value,
            "age_seconds": round(self.age, 3),
            "idle_seconds": round(self.idle_for, 3),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "chunks_in": self.chunks_in,
            "chunks_out": self.chunks_out,
            "streams": len(self._streams),
            "accounted_bytes": self.accounted_bytes,
            "attached_bytes": self.attached_bytes,
            "backend_bytes": self.backend_bytes,
            "buffered_bytes": self.buffered_bytes,
        }

    def __repr__(self) -> str:
        return f"<Session {self.id} {self.kind} {self.state.value} {self.accounted_bytes}B>"
