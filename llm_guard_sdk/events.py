"""What the guard tells the operator's log: start-up, level transitions, sheds and evictions.

Kept apart from the guard's coordination so the wording and the ``extra=`` fields (which JSON
log formatters turn into fields) are in one place:

- start-up (INFO): the effective limit, where it comes from, the sources and the deciding one;
- every level transition: WARNING, or INFO for the recovery to ``normal``;
- sheds and evictions: rate-limited (:class:`~llm_guard_sdk.ratelog.RateLimitedLog`), the
  first one of a burst in full, then one summary line per interval with counts by reason.

``extra`` fields all start with ``llm_guard_`` so they never collide with a formatter's own
(``level`` is often the level name).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from llm_guard_sdk.monitors.sampler import Sampler
from llm_guard_sdk.policy import Level
from llm_guard_sdk.quantities import format_size
from llm_guard_sdk.ratelog import RateLimitedLog

logger = logging.getLogger("llm_guard_sdk")

SUMMARY_INTERVAL = 5.0
"""Seconds between shed (or eviction) summary lines under load."""
ID_PREFIX = 8
"""Characters of a session id shown in logs: enough to find it in status, short to read."""


def _size(value: int | None) -> str:
    return "none" if value is None else format_size(value)


def _used_and_limit(sampler: Sampler) -> tuple[int | None, int | None]:
    """The deciding source's used and limit bytes (the process's when nothing decides)."""
    reading = sampler.readings.get(sampler.worst_source) or sampler.readings.get("process")
    if reading is None:
        return None, sampler.limit_bytes
    return reading.used_bytes, reading.limit_bytes


class GuardEvents:
    """The guard's log lines; ``clock`` is injectable so tests never wait."""

    def __init__(self, *, interval: float = SUMMARY_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sheds = RateLimitedLog(logger, "shed", interval=interval, clock=clock)
        self.evictions = RateLimitedLog(logger, "evicted", interval=interval, clock=clock)
        self.transitions_total = 0

    def fields(self, level: Level, previous: Level, sampler: Sampler) -> dict[str, Any]:
        """The ``extra=`` fields of a level transition."""
        used, limit = _used_and_limit(sampler)
        return {"llm_guard_level": level.label, "llm_guard_previous_level": previous.label,
                "llm_guard_pressure": round(sampler.pressure, 4),
                "llm_guard_source": sampler.worst_source, "llm_guard_used_bytes": used,
                "llm_guard_limit_bytes": limit}

    def started(self, sampler: Sampler) -> None:
        """INFO: the effective limit, its origin, the sources, and which one decides now."""
        names = ", ".join(str(getattr(s, "name", "?")) for s in sampler.sources) or "none"
        logger.info(
            "llm-guard started: memory limit %s (from %s); sources: %s; deciding source: %s "
            "at pressure %.2f", _size(sampler.limit_bytes), sampler.limit_source or "nowhere",
            names, sampler.worst_source or "none", sampler.pressure,
            extra={"llm_guard_limit_bytes": sampler.limit_bytes,
                   "llm_guard_limit_source": sampler.limit_source,
                   "llm_guard_source": sampler.worst_source})

    def level_changed(self, previous: Level, level: Level, sampler: Sampler) -> None:
        """WARNING for every transition, INFO for the recovery to normal."""
        self.transitions_total += 1
        used, limit = _used_and_limit(sampler)
        logger.log(
            logging.INFO if level is Level.NORMAL else logging.WARNING,
            "llm-guard level %s -> %s: pressure %.2f from source %s (%s of %s)",
            previous.label, level.label, sampler.pressure, sampler.worst_source or "none",
            _size(used), _size(limit), extra=self.fields(level, previous, sampler))

    def shed(self, reason: str, detail: str = "") -> None:
        """A refused request or WebSocket (``detail``: its path), rate-limited."""
        where = f" {detail}" if detail else ""
        self.sheds.event(reason, "llm-guard shed a request%s: %s", where, reason,
                         example=detail, extra={"llm_guard_reason": reason})

    def evicted(self, session_id: str, reason: str, held_bytes: int) -> None:
        """A session the guard closed to free memory (or for idling), rate-limited."""
        prefix = session_id[:ID_PREFIX]
        self.evictions.event(reason, "llm-guard evicted session %s (%s, %s accounted)", prefix,
                             reason, _size(held_bytes), example=prefix,
                             extra={"llm_guard_reason": reason, "llm_guard_session": prefix})

    def flush(self) -> None:
        """Write the pending summaries whose interval has passed; called every tick."""
        self.sheds.flush()
        self.evictions.flush()
