"""One session per streaming HTTP request or WebSocket connection.

A session is the unit the guard accounts memory to and the unit it closes under pressure. Apps
hand their per-conversation state to it with :meth:`Session.attach`, so closing the session is what
frees that state instead of a closure or a global cache keeping it alive.
"""

from __future__ import annotations

import enum
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from llm_guard_sdk.registry import SessionRegistry
    from llm_guard_sdk.stream import GuardedStream

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


def new_session_id() -> str:
    """Return an unguessable id (128 bits from the OS CSPRNG) safe to show to the client."""
    return "sess-" + secrets.token_urlsafe(16)


class Session:
    """Everything the guard knows about one connection.

    The registry mutates ``state``/``last_activity`` through its own methods so that its LRU and
    size indexes stay consistent; apps only read these and use :meth:`attach`.
    """

    __slots__ = (
        "__weakref__",
        "_attachments",
        "_bucket",
        "_close_callbacks",
        "_closer",
        "_registry",
        "_streams",
        "_watch",
        "attached_bytes",
        "backend_bytes",
        "bytes_in",
        "bytes_out",
        "chunks_in",
        "chunks_out",
        "close_reason",
        "created_at",
        "id",
        "kind",
        "label",
        "last_activity",
        "path",
        "state",
        "stream_bytes",
        "streams_total",
    )

    def __init__(self, kind: str, path: str = "", *, label: str | None = None) -> None:
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
        self._attachments: list[Any] = []
        self._streams: list[GuardedStream[Any]] = []
        self._close_callbacks: list[Callable[[Session], object]] = []
        self._registry: SessionRegistry | None = None
        self._bucket = -1
        self._closer: Callable[[CloseReason], Awaitable[None]] | None = None
        self._watch: Callable[[], None] | None = None  # starts disconnect detection

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
    def streams(self) -> tuple[GuardedStream[Any], ...]:
        """Guarded streams currently open on this session."""
        return tuple(self._streams)

    @property
    def attachments(self) -> tuple[Any, ...]:
        """Objects the app attached; dropped (and so freed) when the session closes."""
        return tuple(self._attachments)

    def attach(self, obj: T) -> T:
        """Make the session own ``obj`` (e.g. conversation history) so closing it frees ``obj``.

        Returns ``obj`` so it can be used inline: ``history = session.attach([])``.
        """
        self._attachments.append(obj)
        if self._registry is not None and len(self._attachments) == 1:
            self._registry.attached(self)
        return obj

    def detach(self, obj: object) -> None:
        """Stop owning ``obj``; a no-op when it was not attached."""
        self._attachments = [o for o in self._attachments if o is not obj]

    def on_close(self, callback: Callable[[Session], object]) -> None:
        """Run ``callback(session)`` once when the session closes (e.g. abort a backend request)."""
        if self.state is SessionState.CLOSED:
            callback(self)
        else:
            self._close_callbacks.append(callback)

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
        }

    def __repr__(self) -> str:
        return f"<Session {self.id} {self.kind} {self.state.value} {self.accounted_bytes}B>"
