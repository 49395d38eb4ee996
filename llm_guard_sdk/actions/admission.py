"""Admission: whether a new session may open, and the count of those shed."""

from __future__ import annotations

from collections.abc import Callable

from llm_guard_sdk.policy import Level, WatermarkPolicy
from llm_guard_sdk.registry import SessionRegistry

AdmissionCheck = Callable[[], str | None]
"""Run per new session; a returned string sheds the session with that reason."""


class Admission:
    """Refuses new sessions at the shed level, at ``max_sessions``, or when a check says so.

    Args:
        policy: Read for the current level (the sampler updates it).
        registry: Read for capacity; its counters take ``shed_total``.
        retry_after: Seconds a refused client should wait, for the readiness answer.
    """

    def __init__(self, policy: WatermarkPolicy, registry: SessionRegistry, *,
                 retry_after: int = 5) -> None:
        self.policy = policy
        self.registry = registry
        self.retry_after = retry_after
        self.checks: list[AdmissionCheck] = []
        self.shed_by_reason: dict[str, int] = {}

    def admit(self) -> str | None:
        """Return why a new session must be refused, or None to admit it. O(1) per check."""
        if self.policy.level >= Level.SHED:
            return "memory_pressure"
        if self.registry.full:
            return "max_sessions"
        for check in self.checks:
            reason = check()
            if reason:
                return reason
        return None

    def record_shed(self, reason: str) -> None:
        """Count a refused session by reason."""
        self.registry.counters.shed_total += 1
        self.shed_by_reason[reason] = self.shed_by_reason.get(reason, 0) + 1

    def readiness(self) -> tuple[int, dict[str, bool], dict[str, str]]:
        """``GET /llm-guard/ready``: 503 while the level is shed, else 200; no details.

        Only the level decides (not ``max_sessions`` or checks): a readinessProbe then takes
        the pod out of rotation while memory is short, and the liveness probe keeps it alive.
        """
        if self.policy.level >= Level.SHED:
            return 503, {"ready": False}, {"retry-after": str(self.retry_after)}
        return 200, {"ready": True}, {}
