"""A short memory history: one point per interval, kept whether or not anyone is watching.

The page's chart starts from it when a browser connects, so it shows the last minutes at once
rather than an empty axis. A point is a few numbers per source (O(sources), no session is
looked at), which is why it can be recorded while nobody listens.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

from llm_guard_sdk.monitors.base import Reading

Point = dict[str, Any]
"""``{"t": seconds since the guard started, "level": label, "p": {source: pressure},
"u": {source: used bytes}}``; a source without a limit has no pressure."""


def make_point(t: float, level: str, readings: Mapping[str, Reading]) -> Point:
    """One point from the sampler's current readings."""
    pressures: dict[str, float] = {}
    used: dict[str, int] = {}
    for name, reading in readings.items():
        used[name] = reading.used_bytes
        if reading.pressure is not None:
            pressures[name] = round(reading.pressure, 4)
    return {"t": round(t, 2), "level": level, "p": pressures, "u": used}


class MemoryHistory:
    """The last ``size`` points, one at most every ``interval`` seconds.

    Args:
        size: Points kept (600 at one a second: ten minutes).
        interval: Seconds between two points; :meth:`due` says when the next one is.
    """

    def __init__(self, size: int = 600, interval: float = 1.0) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size!r}")
        if interval <= 0:
            raise ValueError(f"interval must be > 0 seconds, got {interval!r}")
        self.interval = interval
        self._points: deque[Point] = deque(maxlen=size)
        self._last_t = float("-inf")

    def __len__(self) -> int:
        return len(self._points)

    def due(self, t: float) -> bool:
        """Whether a point taken at ``t`` would be recorded (an interval since the last)."""
        return t - self._last_t >= self.interval

    def record(self, point: Point) -> None:
        """Keep ``point`` (the oldest goes once ``size`` are kept)."""
        self._last_t = float(point["t"])
        self._points.append(point)

    @property
    def latest(self) -> Point | None:
        """The newest point, or None before the first."""
        return self._points[-1] if self._points else None

    def points(self) -> list[Point]:
        """Every kept point, oldest first (a copy)."""
        return list(self._points)
