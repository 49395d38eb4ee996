"""A log that says what happens without flooding: one line at once, then one summary per interval.

Under memory pressure the guard may shed thousands of requests a second; a log line each would
itself cost memory and CPU exactly when both are short, and bury the level transition that
explains them. :class:`RateLimitedLog` logs the first event of a burst in full, counts the rest
by key (the shed or eviction reason), and writes one summary line per interval with the counts
and a few examples. The clock is injectable so tests never wait.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

_EXAMPLES = 3


class RateLimitedLog:
    """At most one line per ``interval`` seconds for one kind of event.

    Args:
        logger: Where lines go.
        what: Names the events in summary lines (``"shed"`` -> "shed 37 more ...").
        interval: Seconds between lines.
        level: Log level of every line.
        clock: Monotonic seconds; tests pass a fake.
    """

    def __init__(self, logger: logging.Logger, what: str, *, interval: float = 5.0,
                 level: int = logging.WARNING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.what = what
        self.interval = interval
        self.level = level
        self.clock = clock
        self.suppressed: Counter[str] = Counter()
        self.examples: list[str] = []
        self.lines_total = 0
        self._quiet_until = float("-inf")
        self._window_start = 0.0

    def event(self, key: str, message: str, *args: object, example: str = "",
              extra: Mapping[str, Any] | None = None) -> bool:
        """Log ``message % args`` now, or count it under ``key`` for the next summary.

        ``example`` (a session-id prefix, a path) is kept for the summary line, up to three.
        Returns whether the line was written now.
        """
        now = self.clock()
        if now >= self._quiet_until and not self.suppressed:
            self._write(now, message, *args, extra=extra)
            return True
        self.suppressed[key] += 1
        if example and len(self.examples) < _EXAMPLES:
            self.examples.append(example)
        self.flush()
        return False

    def flush(self) -> bool:
        """Write the summary of what was counted, if the interval has passed; call per tick."""
        now = self.clock()
        if not self.suppressed or now < self._quiet_until:
            return False
        counts = ", ".join(f"{key}={n}" for key, n in sorted(self.suppressed.items()))
        examples = f" (e.g. {', '.join(self.examples)})" if self.examples else ""
        total = sum(self.suppressed.values())
        self.suppressed.clear()
        self.examples.clear()
        self._write(now, "llm-guard %s %d more in the last %.1f s: %s%s", self.what, total,
                    now - self._window_start, counts, examples,
                    extra={"llm_guard_suppressed": total})
        return True

    def _write(self, now: float, message: str, *args: object,
               extra: Mapping[str, Any] | None) -> None:
        self.logger.log(self.level, message, *args, extra=extra)
        self.lines_total += 1
        self._quiet_until = now + self.interval
        self._window_start = now
