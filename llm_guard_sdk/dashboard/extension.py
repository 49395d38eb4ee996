"""The "dashboard" extension: the page, its assets and the live feed under the route prefix.

``GET /llm-guard/dashboard`` answers the page (same auth as status; with a token, open it once
as ``?token=...`` to get the auth cookie, see :mod:`llm_guard_sdk.asgi.control`), its assets
live under ``/llm-guard/dashboard/``, and ``/llm-guard/dashboard/feed`` is the SSE feed.

Cost: on every guard tick, at most one history point per ``interval`` (O(sources)), listened
to or not; a snapshot (one pass over the sessions) only while a page listens, once per
``interval`` whatever the number of pages.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from llm_guard_sdk.dashboard.feed import SnapshotFeed, sse_event
from llm_guard_sdk.dashboard.history import MemoryHistory, make_point
from llm_guard_sdk.dashboard.page import ASSET_FILES, asset_reply, page_reply
from llm_guard_sdk.dashboard.snapshot import build_snapshot
from llm_guard_sdk.hooks import ControlStream

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard

FEED_ROUTE = "/dashboard/feed"
PAGE_ROUTE = "/dashboard"


def _asset_route(suffix: str, query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str]]:
    return asset_reply(suffix)


class Dashboard:
    """The live dashboard, kept by the guard as its ``"dashboard"`` extension.

    Args:
        top: Session rows per snapshot (the largest by held bytes; the total is shown too).
        interval: Seconds between two snapshots, and between two history points.
        history_size: History points kept (the chart's span is ``history_size * interval``).
        max_listeners: Pages served at once; more get a 503.
        keepalive: Seconds of quiet before the feed sends a ``ping`` event.
        max_age: Seconds a feed connection lasts before the page reconnects (so an open
            dashboard never holds up a graceful shutdown for longer).
    """

    name = "dashboard"

    def __init__(self, *, top: int = 50, interval: float = 1.0, history_size: int = 600,
                 max_listeners: int = 16, keepalive: float = 15.0,
                 max_age: float = 20.0) -> None:
        if top < 1:
            raise ValueError(f"top must be >= 1, got {top!r}")
        self.top = top
        self.history = MemoryHistory(history_size, interval)
        self.feed = SnapshotFeed(interval=interval, keepalive=keepalive,
                                 max_listeners=max_listeners, max_age=max_age)
        self._guard: Guard | None = None

    def setup(self, guard: Guard) -> None:
        """Register the routes and the tick hook (the guard calls it once)."""
        self._guard = guard
        guard.add_tick_hook(self.on_tick)
        guard.add_control_route(PAGE_ROUTE, lambda _: page_reply(), login=True)
        for suffix in ASSET_FILES:
            guard.add_control_route(suffix, partial(_asset_route, suffix))
        guard.add_control_route(FEED_ROUTE, self.feed_route)

    @property
    def guard(self) -> Guard:
        """The guard it was set up on."""
        if self._guard is None:
            raise RuntimeError("the dashboard is not set up on a guard yet")
        return self._guard

    def on_tick(self, guard: Guard) -> None:
        """Tick hook: a history point when one is due; a snapshot when a page listens."""
        try:
            t = time.monotonic() - guard.started_at
            if self.history.due(t):
                self.history.record(make_point(t, guard.policy.level.label,
                                               guard.sampler.readings))
            if self.feed.due():
                self.feed.publish(self.snapshot())
        except Exception:
            guard.record_internal_error("dashboard tick")

    def snapshot(self) -> dict[str, Any]:
        """What the page shows now (built fresh; the feed shares one per interval)."""
        return build_snapshot(self.guard, self.history.latest, top=self.top)

    def history_document(self) -> dict[str, Any]:
        """The first event a page gets: the kept points and the guard's lines."""
        thresholds = self.guard.policy.thresholds
        return {"interval": self.history.interval, "points": self.history.points(),
                "thresholds": {"warn": thresholds.warn, "evict": thresholds.evict,
                               "shed": thresholds.shed}}

    def feed_route(self, query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str]]:
        """``/dashboard/feed``: the SSE stream, or a 503 when enough pages listen already."""
        if self.feed.full:
            return 503, {"error": f"the dashboard feed serves at most "
                                  f"{self.feed.max_listeners} pages at once"}, {"retry-after": "5"}
        first = [sse_event("history", self.history_document())]
        return 200, ControlStream(self.feed.subscribe(first)), {"x-content-type-options": "nosniff"}
