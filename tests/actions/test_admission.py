"""Admission (actions/admission.py) on its own: a policy, a registry and checks."""

from __future__ import annotations

from llm_guard_sdk.actions import Admission
from llm_guard_sdk.policy import Thresholds, WatermarkPolicy
from llm_guard_sdk.registry import SessionRegistry


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
