"""The chat protocol's application-level heartbeat: ping an idle client, close one that is dead.

ASGI has no WebSocket ping message (protocol pings are the server's, e.g. uvicorn's
``--ws-ping-interval``, and invisible to the app), so a peer whose machine vanished is only
noticed when a send stalls (the guard's ``send_timeout``) or, between answers, never. With
``ping_interval`` set, a chat connection silent that long gets ``{"type": "ping"}``; a client
that sends nothing (``{"type": "pong"}`` or any frame) within ``ping_timeout`` is closed as
dead (1011 "ping timeout", counted as ``sessions.ping_timeout_total``). No timer runs while an
answer streams: its frames prove nothing about the client, but the send timeout covers it.

A live idle client that answers pings is not idle to the guard (its frames are activity), so
the guard's ``idle_timeout`` no longer closes it; the chat settings warn at start-up when the
heartbeat is not safely below ``idle_timeout`` (a live client would then be closed as idle
before it could prove it is alive).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from llm_guard_sdk.asgi.heartbeat import heartbeat_warning

__all__ = ["ChatHeartbeat", "heartbeat_warning"]


class ChatHeartbeat:
    """When to ping and when the client counts as dead; the clock is injectable for tests.

    Args:
        interval: Seconds of silence before a ping; None disables the heartbeat.
        timeout: Seconds to answer a ping.
    """

    def __init__(self, interval: float | None, timeout: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.timeout = timeout
        self.clock = clock
        self.last_seen = clock()
        self.ping_sent: float | None = None
        self.busy = False  # an answer is streaming: no pings

    def seen(self) -> None:
        """The client sent a frame, or an answer just ended: it is alive, start over."""
        self.last_seen = self.clock()
        self.ping_sent = None

    def wait(self) -> float | None:
        """Seconds until :meth:`due` may have something to do; None: wait for ever."""
        if self.interval is None or self.busy:
            return None
        now = self.clock()
        if self.ping_sent is None:
            return max(0.0, self.last_seen + self.interval - now)
        return max(0.0, self.ping_sent + self.timeout - now)

    def due(self) -> Literal["ping", "dead"] | None:
        """``"ping"`` (then call :meth:`pinged`), ``"dead"``, or None: nothing yet."""
        if self.interval is None or self.busy:
            return None
        now = self.clock()
        if self.ping_sent is not None:
            return "dead" if now - self.ping_sent >= self.timeout else None
        return "ping" if now - self.last_seen >= self.interval else None

    def pinged(self) -> None:
        """A ping went out now."""
        self.ping_sent = self.clock()
