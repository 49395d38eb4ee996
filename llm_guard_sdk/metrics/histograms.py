"""Histogram buckets, and a Prometheus histogram that takes weighted observations.

The stream latencies come from :class:`~llm_guard_sdk.actions.progress.StreamProgress`, which
samples on the tick: the chunks of one tick arrive as one value and a count. Observing them one
by one would move the per-chunk cost onto the tick (thousands of calls per tick with many
streams); :meth:`WeightedHistogram.observe_weighted` adds them in one step.
"""

from __future__ import annotations

from bisect import bisect_left

from prometheus_client import Histogram

__all__ = ["HELD_BYTES_BUCKETS", "LATENCY_BUCKETS", "WeightedHistogram"]

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   120.0)
"""Seconds: the tick (0.25 s by default) resolves gaps above it; below it gaps are averages."""
HELD_BYTES_BUCKETS = tuple(float(4**k) for k in range(5, 18))
"""Bytes: powers of four from 1 KiB to 16 GiB (the registry notes held bytes per power of two)."""


class WeightedHistogram(Histogram):
    """A :class:`prometheus_client.Histogram` with :meth:`observe_weighted`.

    It writes the same values :meth:`observe` does (one bucket and the sum), so it works in
    multiprocess mode too; ``tests/metrics`` pins that ``observe_weighted(v, n)`` equals ``n``
    calls of ``observe(v)`` for the installed prometheus-client.
    """

    def observe_weighted(self, amount: float, weight: int) -> None:
        """Observe ``amount`` ``weight`` times in O(log buckets); no-op for weight <= 0."""
        if weight <= 0:
            return
        self._raise_if_not_observable()  # type: ignore[no-untyped-call]
        self._sum.inc(amount * weight)
        index = bisect_left(self._upper_bounds, amount)
        self._buckets[min(index, len(self._buckets) - 1)].inc(weight)
