"""The server's WebSocket heartbeat, read where the server shows it, checked against the guard.

ASGI carries no server settings, but uvicorn's ``receive`` is a bound method of its protocol
object (lifespan or WebSocket), which holds the server's ``Config``: its ``ws_ping_interval``
and ``ws_ping_timeout`` are read from there, once, at start-up (or at the first WebSocket when
the framework hides the lifespan, as Litestar's middleware does). Other servers show nothing,
and nothing is checked (see docs/guide.md). Server pings are invisible to the app: they find a
dead peer for the server, which then tells the app ``websocket.disconnect``.
"""

from __future__ import annotations

import logging
from typing import Any, Final

logger = logging.getLogger("llm_guard_sdk")

SAFETY: Final = 0.5
"""A heartbeat (interval + answer timeout) must fit in this fraction of the idle timeout."""


def heartbeat_warning(interval: float | None, timeout: float | None, idle_timeout: float,
                      *, source: str) -> str | None:
    """Why a heartbeat is not safely below the idle timeout, or None when it is (or is off)."""
    if interval is None:
        return None
    detection = interval + (timeout or 0.0)
    if detection <= SAFETY * idle_timeout:
        return None
    return (f"{source} heartbeat ({interval:g} s + {timeout or 0:g} s to answer) is not safely "
            f"below the guard's idle_timeout ({idle_timeout:g} s): keep interval + timeout at "
            f"most {SAFETY * idle_timeout:g} s, or a dead peer outlives the idle timeout and a "
            "live idle one may be closed as idle before the heartbeat can tell them apart")


def server_ws_heartbeat(receive: Any) -> tuple[float | None, float | None] | None:
    """The server's ``(ws_ping_interval, ws_ping_timeout)`` where ``receive`` shows them."""
    config = getattr(getattr(receive, "__self__", None), "config", None)
    if config is None or not hasattr(config, "ws_ping_interval"):
        return None
    return config.ws_ping_interval, getattr(config, "ws_ping_timeout", None)


class ServerHeartbeatCheck:
    """Checks the server's WebSocket heartbeat once, on the first ``receive`` that shows it."""

    def __init__(self) -> None:
        self.done = False
        self.server: tuple[float | None, float | None] | None = None

    def check(self, receive: Any, idle_timeout: float) -> None:
        """Log what the server's heartbeat means for dead peers (once)."""
        if self.done:
            return
        found = server_ws_heartbeat(receive)
        if found is None:
            return
        self.done = True
        self.server = found
        interval, timeout = found
        if interval is None:
            logger.info("llm-guard: the server sends no WebSocket pings (ws_ping_interval off): "
                        "dead WebSocket peers are found by send_timeout, the chat ping or "
                        "idle_timeout only")
            return
        warning = heartbeat_warning(interval, timeout, idle_timeout,
                                    source="the server's WebSocket")
        if warning is not None:
            logger.warning("llm-guard: %s", warning)
