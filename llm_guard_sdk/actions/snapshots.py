"""Warn-level snapshots: what the process looked like when memory started to climb.

When the policy first reaches ``warn`` (and then at most every ``min_interval`` seconds while it
stays there) the guard records RSS, GC counters, a summary of the session table and, when
``tracemalloc`` is tracing, its top allocation sites. The ring is bounded so the forensics can
never become the leak.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections import deque
from collections.abc import Mapping
from typing import Any

from llm_guard_sdk.monitors.base import Reading
from llm_guard_sdk.policy import Level
from llm_guard_sdk.registry import SessionRegistry


def tracemalloc_top(limit: int = 10) -> list[dict[str, Any]]:
    """Top allocation sites by size when tracemalloc is tracing, else an empty list."""
    if not tracemalloc.is_tracing():
        return []
    stats = tracemalloc.take_snapshot().statistics("lineno")[:limit]
    return [
        {"where": str(stat.traceback[0]), "size_bytes": stat.size, "count": stat.count}
        for stat in stats
    ]


class SnapshotRing:
    """A bounded ring of snapshots, newest last."""

    def __init__(self, size: int, *, min_interval: float = 30.0) -> None:
        self._ring: deque[dict[str, Any]] = deque(maxlen=size)
        self.min_interval = min_interval
        self.total = 0
        self._last = float("-inf")

    def due(self) -> bool:
        """True when the last snapshot is older than ``min_interval``."""
        return time.monotonic() - self._last >= self.min_interval

    def take_on_warn(self, previous: Level, level: Level, readings: Mapping[str, Reading],
                     registry: SessionRegistry, *, pressure: float, source: str) -> None:
        """Take a snapshot when ``level`` first reaches warn, then whenever one is :meth:`due`."""
        if level >= Level.WARN and (previous < Level.WARN or self.due()):
            self.take(level, readings, registry, pressure=pressure, source=source)

    def take(self, level: Level, readings: Mapping[str, Reading], registry: SessionRegistry,
             *, pressure: float, source: str) -> dict[str, Any]:
        """Record one snapshot of the process and the session table."""
        self._last = time.monotonic()
        self.total += 1
        largest = [s.summary() for s in _first(registry.largest_streams(), 5)]
        snapshot: dict[str, Any] = {
            "id": self.total,
            "time": time.time(),
            "level": level.label,
            "pressure": round(pressure, 4),
            "source": source,
            "rss_bytes": readings["process"].used_bytes if "process" in readings else None,
            "gc_counts": list(gc.get_count()),
            "gc_stats": gc.get_stats(),
            "sessions": registry.summary(),
            "streams_open": registry.streams_open,
            "largest_sessions": largest,
            "tracemalloc_top": tracemalloc_top(),
        }
        self._ring.append(snapshot)
        return snapshot

    def recent(self) -> list[dict[str, Any]]:
        """All snapshots in the ring, oldest first."""
        return list(self._ring)


def _first(iterable: Any, n: int) -> list[Any]:
    out = []
    for item in iterable:
        out.append(item)
        if len(out) >= n:
            break
    return out
