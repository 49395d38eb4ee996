"""The sources the guard polls, their latest readings and the worst pressure among them.

Each source is isolated: whatever one raises (a transient ``OSError`` reading a cgroup file, a
``KeyError`` from a metrics dict that changed shape), the others are still read and the level
still follows them. A source that fails keeps its last good reading for ``stale_after - 1``
more intervals, so one failed read at ``shed`` does not open the doors for a burst; after
``stale_after`` failures in a row it is *stale*: dropped from the decision (and from eviction)
until it reads again. Failures are counted per source for the status document and logged at
most once per interval per source.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from llm_guard_sdk.monitors.base import MemorySource, Reading
from llm_guard_sdk.policy import highest_pressure
from llm_guard_sdk.ratelog import RateLimitedLog

logger = logging.getLogger("llm_guard_sdk")

STALE_AFTER = 3
"""Failed reads in a row after which a source's last reading stops counting."""


@dataclass(slots=True)
class SourceHealth:
    """How one source has been reading: for status and for the stale decision."""

    errors_total: int = 0
    failures_in_row: int = 0
    last_error: str = ""
    stale: bool = False


class Sampler:
    """Reads every source once per tick; the policy then acts on :attr:`pressure`.

    :attr:`pressure` is the worst of the *evicting* sources only: an advisory source (a pool the
    backend manages itself, such as vLLM's KV cache) is read and reported but never moves the
    guard's level, so it cannot shed or evict unrelated work. Whoever owns such a source acts
    on its own pressure, read with :meth:`pressure_of`.

    Args:
        sources: The sources to poll, in report order (a list others may append to).
        limit_bytes: The effective memory limit, for status (see ``detect_limit``).
        limit_source: Where that limit comes from (``configured``, ``cgroup``, ``host``), or
            ``""`` when unknown.
        stale_after: Failed reads in a row before a source is dropped from the decision.
        clock: Monotonic seconds for the rate limit of failure logs; tests pass a fake.
    """

    def __init__(self, sources: list[MemorySource], limit_bytes: int | None, *,
                 limit_source: str = "", stale_after: int = STALE_AFTER,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sources = sources
        self.limit_bytes = limit_bytes
        self.limit_source = limit_source
        self.stale_after = max(1, stale_after)
        self.readings: dict[str, Reading] = {}
        self.pressure = 0.0
        self.worst_source = ""
        self.worst: Reading | None = None
        """The reading :attr:`pressure` comes from (None when no evicting source has a limit)."""
        self.advisory: set[str] = set()
        """Sources reported but left out of :attr:`pressure` (e.g. vLLM's KV cache)."""
        self.health: dict[str, SourceHealth] = {}
        self._last_good: dict[str, Reading] = {}
        self._errors: dict[str, RateLimitedLog] = {}
        self._clock = clock

    def add(self, source: MemorySource, *, evicts: bool = True) -> None:
        """Poll ``source`` too; ``evicts=False`` makes it advisory."""
        self.sources.append(source)
        if not evicts:
            self.advisory.add(source.name)

    def read(self) -> float:
        """Read every source, each isolated from the others' failures; return the worst one.

        Only evicting sources count toward the returned pressure; advisory ones are reported.
        """
        readings: dict[str, Reading] = {}
        for source in self.sources:
            name = str(getattr(source, "name", type(source).__name__))
            health = self.health.setdefault(name, SourceHealth())
            try:
                reading = source.read()
            except Exception as exc:  # any failure of one source must not stop the others
                kept = self._failed(name, health, exc)
                if kept is not None:
                    readings[kept.name] = kept
                continue
            if health.failures_in_row:
                self._recovered(name, health)
            self._last_good[name] = reading
            readings[reading.name] = reading
        self.readings = readings
        self.pressure, worst = highest_pressure(self.evictable())
        self.worst = worst
        self.worst_source = worst.name if worst is not None else ""
        return self.pressure

    def _failed(self, name: str, health: SourceHealth, exc: Exception) -> Reading | None:
        """Count the failure; return the last good reading while the source is not stale."""
        health.errors_total += 1
        health.failures_in_row += 1
        health.last_error = f"{type(exc).__name__}: {exc}"[:200]
        log = self._errors.get(name)
        if log is None:
            log = self._errors[name] = RateLimitedLog(logger, f"source {name} failed",
                                                      clock=self._clock)
        log.event(type(exc).__name__, "llm-guard source %s failed to read (%s)", name,
                  health.last_error, extra={"llm_guard_source": name})
        if health.failures_in_row < self.stale_after:
            return self._last_good.get(name)
        if not health.stale:
            health.stale = True
            logger.warning("llm-guard source %s is stale after %d failed reads in a row; "
                           "it no longer counts until it reads again (last error: %s)",
                           name, health.failures_in_row, health.last_error,
                           extra={"llm_guard_source": name})
        return None

    def _recovered(self, name: str, health: SourceHealth) -> None:
        if health.stale:
            logger.info("llm-guard source %s reads again after %d failures", name,
                        health.failures_in_row, extra={"llm_guard_source": name})
        health.failures_in_row = 0
        health.stale = False

    def last_reading(self, name: str) -> Reading | None:
        """The last good reading of source ``name`` (also of a stale one), or None."""
        return self._last_good.get(name)

    def evictable(self) -> list[Reading]:
        """The latest readings of the sources that decide the level and may evict sessions."""
        return [r for name, r in self.readings.items() if name not in self.advisory]

    def pressure_of(self, name: str) -> float | None:
        """The latest pressure of one source (advisory or not); None if unknown or unlimited."""
        reading = self.readings.get(name)
        return reading.pressure if reading is not None else None
