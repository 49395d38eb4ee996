"""The live feed: server-sent events, one snapshot per interval shared by every listener.

A snapshot is built (and JSON-encoded) once, on the guard's tick, and only while at least one
page listens; each listener sends the newest one it has not sent yet, so a slow page skips
snapshots instead of queueing them (nothing grows with a slow reader). Listeners are counted
and capped; a subscription is a plain async iterator whose ``aclose()`` always releases its
slot, even if it never started.

A subscription also ends by itself after ``max_age`` seconds (the page reconnects at once and
gets the history again): servers wait for open responses when they shut down gracefully
(uvicorn tells a running response nothing), so a dashboard left open must not hold up a
rolling restart for longer than that.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

RETRY_MS = 1000
"""The ``retry:`` field: how soon a browser's ``EventSource`` reconnects after a drop."""


def sse_event(event: str, document: Any) -> bytes:
    """One SSE event with a JSON ``data`` line (JSON has no raw newlines, so one line)."""
    data = json.dumps(document, separators=(",", ":"), allow_nan=False)
    return f"event: {event}\ndata: {data}\n\n".encode()


class SnapshotFeed:
    """Builds snapshots on demand and hands the newest to every subscription.

    Args:
        interval: Seconds between two snapshots (the guard's ticks are more frequent).
        keepalive: Seconds without a snapshot before a ``ping`` event is sent, so a page can
            tell a quiet feed from a dead one, and a vanished client is noticed on the write.
        max_listeners: Subscriptions served at once; :meth:`subscribe` refuses more.
        max_age: Seconds after which a subscription ends (the page reconnects).
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, *, interval: float = 1.0, keepalive: float = 15.0,
                 max_listeners: int = 16, max_age: float = 20.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if interval <= 0 or keepalive <= 0 or max_age <= 0:
            raise ValueError("interval, keepalive and max_age must be > 0 seconds")
        if max_listeners < 1:
            raise ValueError(f"max_listeners must be >= 1, got {max_listeners!r}")
        self.interval = interval
        self.keepalive = keepalive
        self.max_listeners = max_listeners
        self.max_age = max_age
        self.listeners = 0
        self.built_total = 0
        """Snapshots built so far (each one shared by all listeners)."""
        self.version = 0
        self.latest = b""
        self._clock = clock
        self._built_at = float("-inf")
        self._changed: asyncio.Event | None = None

    @property
    def full(self) -> bool:
        """True when another subscription would exceed ``max_listeners``."""
        return self.listeners >= self.max_listeners

    def due(self) -> bool:
        """Whether a tick should build a snapshot now: someone listens and one is due."""
        return self.listeners > 0 and self._clock() - self._built_at >= self.interval

    def publish(self, snapshot: dict[str, Any]) -> None:
        """Encode ``snapshot`` once and wake every subscription."""
        self.latest = sse_event("snapshot", snapshot)
        self.version += 1
        self.built_total += 1
        self._built_at = self._clock()
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def subscribe(self, first: list[bytes]) -> Subscription:
        """A new subscription that sends ``first`` (the history), then the snapshots.

        Raises:
            RuntimeError: ``max_listeners`` subscriptions are open (check :attr:`full`).
        """
        if self.full:
            raise RuntimeError(f"the dashboard feed serves at most {self.max_listeners} pages")
        return Subscription(self, first)

    def now(self) -> float:
        """The feed's clock (monotonic seconds)."""
        return self._clock()

    async def wait_changed(self, seen: int, timeout: float) -> bool:  # noqa: ASYNC109
        """Wait until a snapshot newer than version ``seen`` exists; False after ``timeout``."""
        if self.version != seen:
            return True
        if self._changed is None:
            self._changed = asyncio.Event()
        changed = self._changed
        try:
            async with asyncio.timeout(timeout):
                await changed.wait()
        except TimeoutError:
            return False
        return True

    def joined(self) -> None:
        """A subscription opened (called by :class:`Subscription`)."""
        self.listeners += 1

    def left(self) -> None:
        """A subscription closed; the last one drops the snapshot, which would go stale."""
        self.listeners -= 1
        if self.listeners == 0:
            self.latest = b""


class Subscription:
    """One page's view of the feed: ``retry``, the first events, then each new snapshot."""

    def __init__(self, feed: SnapshotFeed, first: list[bytes]) -> None:
        self._feed = feed
        self._pending = [f"retry: {RETRY_MS}\n\n".encode(), *first]
        # A current snapshot is sent at once; without one, the next tick builds it.
        self._seen = feed.version - 1 if feed.latest else feed.version
        self._ends_at = feed.now() + feed.max_age
        self._open = True
        feed.joined()

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> bytes:
        if not self._open:
            raise StopAsyncIteration
        if self._pending:
            return self._pending.pop(0)
        feed = self._feed
        left = self._ends_at - feed.now()
        if left <= 0:
            await self.aclose()
            raise StopAsyncIteration
        if not await feed.wait_changed(self._seen, min(feed.keepalive, left)):
            return sse_event("ping", {})
        self._seen = feed.version
        return feed.latest

    async def aclose(self) -> None:
        """Leave the feed (once); later iteration ends."""
        if self._open:
            self._open = False
            self._feed.left()
