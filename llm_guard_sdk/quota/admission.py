"""Quota admission: refuse a session whose predicted footprint would pass the evict watermark.

The decision uses the measured memory, not the model's prediction of it: what eviction acts on
is the measurement, and the model only supplies what no measurement can know before a session
starts, its footprint. By Little's law the load term ``alpha·QPS·L`` is ``(alpha·L / D)`` bytes per
concurrent session (``D`` the mean session duration), so a new session is refused when

    used + (admitted since the last sample + 1) · alpha·L / D  >  evict_at · limit

``L`` is the mean context of the recent requests. Counting the sessions admitted since the last
sample keeps a burst between two samples from all being admitted against the same reading. The
check runs per new session, so it is O(1): the sampler's tick prepares the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REASON = "quota"
"""The shed reason (``shed_by_reason["quota"]``), answered with 503 and ``Retry-After``."""


@dataclass(frozen=True, slots=True)
class Headroom:
    """The numbers one sample gives the admission check.

    Attributes:
        used_bytes: Measured memory of the model's target at the sample.
        budget_bytes: ``evict_at · limit``.
        per_session_bytes: ``alpha·L / D`` from the fit.
    """

    used_bytes: int
    budget_bytes: float
    per_session_bytes: float


class QuotaAdmission:
    """The admission check registered with ``guard.add_admission_check`` when enabled."""

    def __init__(self) -> None:
        self.refused_total = 0
        self.headroom: Headroom | None = None
        self._admitted_since_sample = 0

    def update(self, headroom: Headroom | None) -> None:
        """A new sample: None (no fit, no limit or no duration yet) admits everything."""
        self.headroom = headroom
        self._admitted_since_sample = 0

    def check(self) -> str | None:
        """``"quota"`` when one more session would pass the budget, else None."""
        h = self.headroom
        if h is None:
            return None
        if h.used_bytes + (self._admitted_since_sample + 1) * h.per_session_bytes \
                > h.budget_bytes:
            self.refused_total += 1
            return REASON
        self._admitted_since_sample += 1
        return None

    def describe(self) -> dict[str, Any]:
        """For the status section."""
        h = self.headroom
        return {
            "refused_total": self.refused_total,
            "used_bytes": None if h is None else h.used_bytes,
            "budget_bytes": None if h is None else round(h.budget_bytes),
            "per_session_bytes": None if h is None else round(h.per_session_bytes),
            "admitted_since_sample": self._admitted_since_sample,
        }
