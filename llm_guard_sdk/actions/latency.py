"""Streaming latency quantiles: a fixed log-scale histogram, and a rolling pair of them.

Why a log-scale histogram (the DDSketch idea, with a fixed range) rather than the P² algorithm
or a library:

* **Weighted adds in O(1).** The adaptive timeouts sample at the guard's tick, not per chunk
  (the hot path stays clock-free), so one observation often stands for several chunks:
  ``add(value, weight)`` is one index computation and one integer increment. P² takes one
  sample at a time and updates five markers per sample.
* **A guaranteed relative error.** Bucket ``i`` covers ``[low * g**(i-1), low * g**i)`` with
  ``g = (1 + a) / (1 - a)``; answering with the bucket's centre ``2 * low * g**i / (g + 1)`` is
  within ``a`` of every value in it, whatever the distribution (P²'s error depends on it).
  ``a = 1 %`` is far finer than a timeout needs.
* **Mergeable and resettable.** Two windows are summed bucket by bucket for a quantile and a
  window is zeroed in place when it rotates, so old behaviour ages out with no allocation.
* **No per-sample allocation.** The counters are one list preallocated at construction.

``ddsketch`` (Datadog) implements the same sketch but grows its store on demand, cannot be
cleared in place and merges by mutating; for ~100 lines the core keeps no extra dependency.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from itertools import accumulate
from operator import add

__all__ = ["LogHistogram", "RollingQuantile"]

_log = math.log


class LogHistogram:
    """Counts of positive values in preallocated log-scale buckets.

    Values at or below ``low`` share the first bucket (answered as ``low``), values from
    ``high`` up the last one (answered as ``high``): quantiles are exact to ``relative_accuracy``
    inside ``[low, high]`` and clamped outside it.

    Args:
        relative_accuracy: Worst relative error of a quantile inside the range, in (0, 0.5).
        low: Smallest value told apart (seconds for latencies), > 0.
        high: Largest value told apart, > ``low``.
    """

    __slots__ = ("_inv_ln_gamma", "_inv_low", "_last", "_zeros", "counts", "gamma", "high",
                 "low", "total")

    def __init__(self, relative_accuracy: float = 0.01, *, low: float = 1e-3,
                 high: float = 1e4) -> None:
        if not 0 < relative_accuracy < 0.5:
            raise ValueError(f"relative_accuracy must be in (0, 0.5), got {relative_accuracy!r}")
        if not 0 < low < high:
            raise ValueError(f"need 0 < low < high, got low={low!r}, high={high!r}")
        self.gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self.low, self.high = low, high
        self._inv_low = 1.0 / low
        self._inv_ln_gamma = 1.0 / math.log(self.gamma)
        size = math.ceil(math.log(high / low) * self._inv_ln_gamma) + 2
        self._last = size - 1
        self.counts = [0] * size
        self._zeros = (0,) * size
        self.total = 0

    def index(self, value: float) -> int:
        """The bucket of ``value``: bucket ``i`` holds ``[low * g**(i-1), low * g**i)``."""
        if not value > self.low:  # also NaN: never raise on the tick
            return 0
        if value >= self.high:
            return self._last
        i = int(_log(value * self._inv_low) * self._inv_ln_gamma) + 1
        return i if i < self._last else self._last

    def add(self, value: float, weight: int = 1) -> None:
        """Count ``value`` ``weight`` times (NaN and negatives land in the first bucket)."""
        # index() inlined: this runs for every stream that made progress, on every tick.
        if not value > self.low:
            i = 0
        elif value >= self.high:
            i = self._last
        else:
            i = int(_log(value * self._inv_low) * self._inv_ln_gamma) + 1
            if i > self._last:
                i = self._last
        self.counts[i] += weight
        self.total += weight

    def value_at(self, index: int) -> float:
        """The value a bucket answers with: its centre, within the relative accuracy."""
        if index <= 0:
            return self.low
        if index >= self._last:
            return self.high
        return 2 * self.low * self.gamma**index / (self.gamma + 1)

    def clear(self) -> None:
        """Forget every count, in place."""
        self.counts[:] = self._zeros
        self.total = 0

    def quantile(self, q: float, *others: LogHistogram) -> float | None:
        """The ``q`` quantile (nearest rank) of this histogram and ``others`` together.

        The others must have the same buckets. Returns None when all are empty.
        """
        if not 0 <= q <= 1:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        total = self.total + sum(o.total for o in others)
        if total <= 0:
            return None
        counts = self.counts
        for other in others:
            counts = list(map(add, counts, other.counts))
        rank = max(1, math.ceil(q * total))
        return self.value_at(bisect_left(list(accumulate(counts)), rank))


class RollingQuantile:
    """Two alternating histograms, so behaviour older than two windows is forgotten.

    New values go to the current window; every ``window`` seconds it becomes the previous one
    and the old previous is cleared to take new values. Quantiles cover both, so they always
    rest on between one and two windows of history.

    Args:
        window: Seconds per window, > 0.
        relative_accuracy, low, high: As :class:`LogHistogram`.
        now: The clock reading the first window starts at.
    """

    __slots__ = ("current", "previous", "rotated_at", "window")

    def __init__(self, window: float, *, relative_accuracy: float = 0.01, low: float = 1e-3,
                 high: float = 1e4, now: float = 0.0) -> None:
        if not window > 0:
            raise ValueError(f"window must be seconds > 0, got {window!r}")
        self.window = window
        self.current = LogHistogram(relative_accuracy, low=low, high=high)
        self.previous = LogHistogram(relative_accuracy, low=low, high=high)
        self.rotated_at = now

    @property
    def count(self) -> int:
        """Values held across both windows."""
        return self.current.total + self.previous.total

    def add(self, value: float, weight: int = 1) -> None:
        """Count ``value`` ``weight`` times in the current window."""
        self.current.add(value, weight)

    def rotate(self, now: float) -> bool:
        """Start a new window if the current one is ``window`` old; True if it rotated.

        After two windows without a rotation (nobody asked), both windows are stale and cleared.
        """
        age = now - self.rotated_at
        if age < self.window:
            return False
        self.previous, self.current = self.current, self.previous
        self.current.clear()
        if age >= 2 * self.window:
            self.previous.clear()
        self.rotated_at = now
        return True

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile over both windows, or None when empty."""
        return self.current.quantile(q, self.previous)
