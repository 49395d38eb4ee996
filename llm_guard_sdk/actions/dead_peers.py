"""Dead peers: close sessions whose send to the client has stalled past ``send_timeout``.

A client that stops reading (a frozen tab, a suspended laptop, a proxy that lost its peer) fills
its socket buffer; uvicorn's ``send`` then awaits the transport's drain forever, and the model
keeps generating into a response nobody reads (sse-starlette#89). The hot path pays no timer
for this: each connection counts its sends and notes the task inside one (:class:`SendWatch`),
and this action, run from the sampler tick at most once per ``interval``, sees a connection
still inside the same send as on an earlier check. Like the chunk timeout, the stall is
measured from the first check that saw it, so it is precise to ``interval``.

The check must stay cheap with 10,000 idle WebSockets: the watched connections are a plain set
(the connection forgets itself when its app returns), and only those with a send in flight
(``sending``, one attribute load each) are asked for their stall. Copying a ``WeakSet`` of them
per check cost ~8 ms per tick at that size (``benchmarks/ws_scale.py``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from llm_guard_sdk.session import CloseReason, Session

_MAX_INTERVAL = 1.0  # seconds between checks, at most; a quarter of send_timeout when shorter


class SendWatch(Protocol):
    """A connection whose sends can stall (``asgi.connection.Connection``)."""

    session: Session
    in_send: bool  # inside the server's send, in a frame of the connection's own

    @property
    def pending_send(self) -> object:
        """The server's awaitable of a send made without such a frame (or None)."""

    def stalled_for(self, now: float) -> float:
        """Seconds the current send has been stuck as seen by these checks (0: not stuck)."""


class DeadPeers:
    """Closes, as ``send_timeout``, the sessions whose current send is stuck too long.

    Args:
        close_session: The guard's one close sequence.
        send_timeout: Seconds a send may take; None disables the check (and :meth:`watch`).
    """

    def __init__(self, close_session: Callable[[Session, CloseReason], Awaitable[None]], *,
                 send_timeout: float | None) -> None:
        self.close_session = close_session
        self.send_timeout = send_timeout
        self.interval = min(_MAX_INTERVAL, send_timeout / 4) if send_timeout else 0.0
        # A set (identity hash): ~40 B less per idle connection than a dict keyed by id();
        # each connection forgets itself on finish.
        self._connections: set[SendWatch] = set()
        self._next_check = 0.0
        self.closed_total = 0

    def watch(self, connection: SendWatch) -> None:
        """Check ``connection`` from now on, until :meth:`forget` is called (always, once done).

        A strong reference: the owner must call :meth:`forget` when the connection ends.
        """
        if self.send_timeout is not None:
            self._connections.add(connection)

    def __len__(self) -> int:
        """Connections being watched."""
        return len(self._connections)

    def forget(self, connection: SendWatch) -> None:
        """Stop checking ``connection`` (its app returned)."""
        self._connections.discard(connection)

    async def run(self) -> int:
        """Close the sessions of stalled connections; returns how many were closed."""
        timeout = self.send_timeout
        if timeout is None or not self._connections:
            return 0
        now = time.monotonic()
        if now < self._next_check:
            return 0
        self._next_check = now + self.interval
        # No copy of the set: nothing here awaits, so no connection can forget itself before
        # the sessions are closed below (one pass over 10,000 connections is a cache miss
        # each; a copy was a second one). Only connections that may be inside a send can be
        # stalled (stalled_for checks); the rest, e.g. idle WebSockets, cost two attribute loads.
        dead = [c.session for c in self._connections
                if (c.in_send or c.pending_send is not None) and c.stalled_for(now) > timeout]
        for session in dead:
            await self.close_session(session, CloseReason.SEND_TIMEOUT)
        self.closed_total += len(dead)
        return len(dead)
