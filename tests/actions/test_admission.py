"""Admission (actions/admission.py) on its own: a policy, a registry and checks."""

from __future__ import annotations

from llm_guard_sdk.actions import TENANT_QUOTA, Admission
from llm_guard_sdk.policy import Thresholds, WatermarkPolicy
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import CloseReason
from llm_guard_sdk.tenants import TenantBook


def make_admission(max_sessions: int = 10) -> Admission:
    policy = WatermarkPolicy(Thresholds(0.75, 0.85, 0.92, 0.05))
    return Admission(policy, SessionRegistry(max_sessions))


def test_reasons_in_order_pressure_capacity_checks() -> None:
    admission = make_admission(max_sessions=1)
    verdict: list[str | None] = ["queue_full"]
    admission.checks.append(lambda: verdict[0])
    assert admission.admit() == "queue_full"
    admission.registry.open("http")
    assert admission.admit() == "max_sessions"
    admission.policy.update(0.95)
    assert admission.admit() == "memory_pressure"


def test_record_shed_counts_by_reason_and_in_total() -> None:
    admission = make_admission()
    for reason in ("queue_full", "memory_pressure", "queue_full"):
        admission.record_shed(reason)
    assert admission.shed_by_reason == {"queue_full": 2, "memory_pressure": 1}
    assert admission.registry.counters.shed_total == 3


def test_shed_ladder_refuses_low_first_and_high_last() -> None:
    policy = WatermarkPolicy(Thresholds(0.75, 0.85, 0.92, 0.05))
    pressure = [0.0]
    admission = Admission(policy, SessionRegistry(10), pressure=lambda: pressure[0])
    # low from halfway between evict and shed, normal at shed, high halfway from shed to 1
    assert admission.ladder.as_dict(0.92) == {"low": 0.885, "normal": 0.92, "high": 0.96}

    def verdicts(value: float) -> list[str | None]:
        pressure[0] = value
        policy.update(value)
        return [admission.admit(None, p) for p in Priority]

    shed = "memory_pressure"
    assert verdicts(0.86) == [None, None, None]  # evict level: everyone admitted
    assert verdicts(0.89) == [shed, None, None]  # low goes first
    assert verdicts(0.93) == [shed, shed, None]  # shed level: normal too, not high
    assert verdicts(0.97) == [shed, shed, shed]  # the ceiling: high as well
    assert verdicts(0.90) == [shed, shed, None]  # hysteresis keeps normal shed on the way down


def test_explicit_ceiling_and_no_pressure_reader() -> None:
    policy = WatermarkPolicy(Thresholds(0.75, 0.85, 0.92, 0.05))
    assert Admission(policy, SessionRegistry(1), ceiling=0.99).ladder.ceiling == 0.99
    plain = Admission(policy, SessionRegistry(1))  # without a reader classes follow the level
    policy.update(0.95)
    assert [plain.admit(None, p) for p in Priority] == ["memory_pressure"] * 2 + [None]


def test_tenant_cap_refuses_with_tenant_quota_after_the_servers_reasons() -> None:
    registry = SessionRegistry(3, tenants=TenantBook(max_sessions=2))
    admission = Admission(WatermarkPolicy(Thresholds(0.75, 0.85, 0.92, 0.05)), registry)
    registry.open("http", tenant="a")
    assert admission.admit("a") is None
    second = registry.open("http", tenant="a")
    assert admission.admit("a") == TENANT_QUOTA
    assert admission.admit("b") is None  # other tenants are served
    registry.open("http", tenant="b")
    assert admission.admit("a") == "max_sessions"  # the server's reason first
    registry.start_closing(second, CloseReason.COMPLETED)
    registry.forget(second)
    assert admission.admit("a") is None  # closing one frees its tenant's slot
    admission.record_shed(TENANT_QUOTA, "a")
    figures = registry.tenants.figures("a")
    assert figures is not None and figures.refused_total == 1


def test_projection_refuses_the_burst_that_would_cross_the_shed_line_before_a_sample() -> None:
    """At evict level (0.875 sampled) the level admits all; the projection stops the burst."""
    from llm_guard_sdk.projection import AdmissionProjection

    mib = 2**20
    policy = WatermarkPolicy(Thresholds(0.75, 0.85, 0.92, 0.05))
    projection = AdmissionProjection()
    pressure = [0.0]
    admission = Admission(policy, SessionRegistry(1000), pressure=lambda: pressure[0],
                          projection=projection)
    projection.observe(8 * mib)
    projection.sampled(448 * mib, 512 * mib)
    pressure[0] = 448 / 512
    policy.update(pressure[0])
    verdicts = [admission.admit() for _ in range(10)]
    # room under 0.92 (471 MiB): two more of 8 MiB (464), a third would reach 472
    assert verdicts == [None, None] + ["memory_pressure"] * 8
    assert projection.admitted_since_sample == 2  # refusals reserve nothing
    # low goes first (its bar is 0.885: 453 MiB), high only at the ceiling (0.96: 491 MiB)
    assert admission.admit(None, Priority.LOW) == "memory_pressure"
    assert [admission.admit(None, Priority.HIGH) for _ in range(4)] == [None] * 3 + [
        "memory_pressure"]  # the fifth admitted reaches 488 MiB; a sixth would be 496
    projection.sampled(430 * mib, 512 * mib)  # the next sample: evictions freed memory
    assert admission.admit() is None


def test_without_projection_admission_follows_the_sampled_level_only() -> None:
    admission = make_admission(max_sessions=100)
    admission.policy.update(0.91)
    assert [admission.admit() for _ in range(50)] == [None] * 50
