"""Admission: whether a new session may open, and the count of those refused.

Two kinds of refusal, told apart by status code: the server's pressure (503, ``memory_pressure``,
``max_sessions`` or a check's reason) and a tenant's own quota (429, ``tenant_quota``).

Memory pressure refuses by priority class, lowest first (:class:`ShedLadder`): ``low`` from
halfway between ``evict_at`` and ``shed_at``, ``normal`` at the shed level (as every session
without priorities always was), ``high`` only from ``shed_ceiling``. With an
:class:`~llm_guard_sdk.projection.AdmissionProjection`, each class's bar is also compared with
the projected pressure: the last sample plus what the sessions admitted since are expected to
take, so a burst between two samples is refused before it allocates (see that module).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llm_guard_sdk.policy import Level, Thresholds, WatermarkPolicy
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.projection import AdmissionProjection
from llm_guard_sdk.registry import SessionRegistry

AdmissionCheck = Callable[[], str | None]
"""Run per new session; a returned string sheds the session with that reason."""
TENANT_QUOTA = "tenant_quota"
"""The reason a tenant over its caps is refused with (429, not 503)."""
QUOTA_REASONS = frozenset({TENANT_QUOTA})
"""Reasons that are the client's quota (429) rather than the server's pressure (503)."""


@dataclass(frozen=True, slots=True)
class ShedLadder:
    """Pressure at which each priority class starts being refused.

    ``normal`` follows the policy's shed level (with its hysteresis); ``low`` and ``high``
    compare the latest pressure with their own bar, ``low``'s below the shed level and
    ``high``'s above it.
    """

    low: float
    ceiling: float

    @classmethod
    def of(cls, thresholds: Thresholds, ceiling: float | None = None) -> ShedLadder:
        """``low`` halfway from evict to shed; ``ceiling`` (default: halfway from shed to 1)."""
        return cls(low=(thresholds.evict + thresholds.shed) / 2,
                   ceiling=(1 + thresholds.shed) / 2 if ceiling is None else ceiling)

    def as_dict(self, shed: float) -> dict[str, float]:
        """The three bars, for status."""
        return {"low": round(self.low, 4), "normal": shed, "high": round(self.ceiling, 4)}


class Admission:
    """Refuses new sessions under pressure (by class), at capacity, over quota, or by check.

    Args:
        policy: Read for the current level (the sampler updates it).
        registry: Read for capacity and per-tenant counts; its counters take ``shed_total``.
        retry_after: Seconds a refused client should wait, for the readiness answer.
        pressure: The latest worst pressure (the sampler's); None: classes follow the level.
        ceiling: ``shed_ceiling``; None: halfway from ``shed_at`` to 1.
        projection: Projects the pressure with the sessions admitted since the last sample; each
            admitted session is counted there. None: the sampled pressure and level alone.
    """

    def __init__(self, policy: WatermarkPolicy, registry: SessionRegistry, *,
                 retry_after: int = 5, pressure: Callable[[], float] | None = None,
                 ceiling: float | None = None,
                 projection: AdmissionProjection | None = None) -> None:
        self.policy = policy
        self.projection = projection
        self.registry = registry
        self.retry_after = retry_after
        self.pressure = pressure
        self.ladder = ShedLadder.of(policy.thresholds, ceiling)
        self.checks: list[AdmissionCheck] = []
        self.shed_by_reason: dict[str, int] = {}
        self.shed_by_protocol: dict[tuple[str, str], int] = {}
        """Refusals by ``(protocol, reason)``: ``http`` or ``websocket``, for the metrics."""

    def admit(self, tenant: str | None = None,
              priority: Priority = Priority.NORMAL) -> str | None:
        """Return why a new session must be refused, or None to admit it. O(1) per check.

        The server's reasons come first (pressure, then capacity), then the tenant's quota.
        """
        if self._under_pressure(priority):
            return "memory_pressure"
        if self.registry.full:
            return "max_sessions"
        if tenant is not None and self.registry.tenants.over_quota(tenant):
            return TENANT_QUOTA
        for check in self.checks:
            reason = check()
            if reason:
                return reason
        if self.projection is not None:
            self.projection.admitted()
        return None

    def _under_pressure(self, priority: Priority) -> bool:
        projected = self.projection.projected_pressure() if self.projection is not None else None
        shedding = self.policy.level >= Level.SHED or (
            projected is not None and projected >= self.policy.thresholds.shed)
        if self.pressure is None:
            return shedding and priority <= Priority.NORMAL
        pressure = max(self.pressure(), projected or 0.0)
        if priority is Priority.HIGH:
            return pressure >= self.ladder.ceiling
        if priority is Priority.LOW:
            return shedding or pressure >= self.ladder.low
        return shedding

    def record_shed(self, reason: str, tenant: str | None = None, *,
                    protocol: str = "http") -> None:
        """Count a refused session by reason and protocol (and against its tenant)."""
        self.registry.counters.shed_total += 1
        self.shed_by_reason[reason] = self.shed_by_reason.get(reason, 0) + 1
        key = (protocol, reason)
        self.shed_by_protocol[key] = self.shed_by_protocol.get(key, 0) + 1
        if tenant is not None:
            self.registry.tenants.refused(tenant)

    def readiness(self) -> tuple[int, dict[str, bool], dict[str, str]]:
        """``GET /llm-guard/ready``: 503 while the level is shed, else 200; no details.

        Only the level decides (not ``max_sessions`` or checks): a readinessProbe then takes
        the pod out of rotation while memory is short, and the liveness probe keeps it alive.
        """
        if self.policy.level >= Level.SHED:
            return 503, {"ready": False}, {"retry-after": str(self.retry_after)}
        return 200, {"ready": True}, {}
