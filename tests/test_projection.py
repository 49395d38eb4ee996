"""Admission projection (projection.py): reservations between samples, the expected size."""

from __future__ import annotations

import pytest

from llm_guard_sdk.projection import AdmissionProjection

MIB = 2**20


def test_no_projection_before_a_session_was_measured_or_without_a_limit() -> None:
    projection = AdmissionProjection()
    projection.sampled(400 * MIB, 512 * MIB)
    assert projection.projected_pressure() is None  # nothing measured: the level alone decides
    projection.observe(8 * MIB)
    projection.sampled(400 * MIB, None)
    assert projection.projected_pressure() is None


def test_each_admission_reserves_the_expected_size_until_the_next_sample() -> None:
    projection = AdmissionProjection()
    projection.observe(8 * MIB)
    projection.sampled(448 * MIB, 512 * MIB)
    assert projection.projected_pressure() == pytest.approx(456 / 512)  # the next one included
    for _ in range(3):
        projection.admitted()
    assert projection.admitted_since_sample == 3
    assert projection.reserved_bytes == 24 * MIB
    assert projection.projected_pressure() == pytest.approx((448 + 4 * 8) / 512)
    assert projection.projected_pressure(extra_sessions=0) == pytest.approx(472 / 512)
    projection.sampled(472 * MIB, 512 * MIB)  # the sample sees what they took: reservations end
    assert projection.admitted_since_sample == 0
    assert projection.projected_pressure(extra_sessions=0) == pytest.approx(472 / 512)


def test_expected_size_is_the_largest_in_the_window_and_forgets_old_ones() -> None:
    projection = AdmissionProjection(window=3)
    projection.observe(0)  # unmeasured sessions say nothing
    assert projection.expected_session_bytes == 0
    for size in (2 * MIB, 8 * MIB, 1 * MIB):
        projection.observe(size)
    assert projection.expected_session_bytes == 8 * MIB
    projection.observe(1 * MIB)  # 2 MiB leaves; 8 MiB still in
    assert projection.expected_session_bytes == 8 * MIB
    projection.observe(3 * MIB)  # 8 MiB leaves: the largest of (1, 1, 3)
    assert projection.expected_session_bytes == 3 * MIB
    projection.observe(1 * MIB)
    projection.observe(1 * MIB)
    projection.observe(1 * MIB)
    assert projection.expected_session_bytes == 1 * MIB


def test_section_reports_the_reservation() -> None:
    projection = AdmissionProjection()
    assert projection.section()["projected_pressure"] is None
    projection.observe(4 * MIB)
    projection.sampled(100 * MIB, 200 * MIB)
    projection.admitted()
    assert projection.section() == {"expected_session_bytes": 4 * MIB, "admitted_since_sample": 1,
                                  "reserved_bytes": 4 * MIB, "projected_pressure": 0.54}


def test_window_must_hold_one_session() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        AdmissionProjection(window=0)


@pytest.mark.anyio
async def test_the_guard_feeds_the_projection_from_closes_and_samples() -> None:
    """Wiring: a close teaches the expected size, a sample resets the reservations."""
    from llm_guard_sdk.session import CloseReason
    from tests.support.guard import fake_source, idle, make_guard

    fake = fake_source(850_000)  # of 1_000_000: evict level, 70_000 under shed (0.92)
    guard = make_guard(fake, max_evictions_per_tick=1)
    assert guard.admit() is None  # no session measured yet: the level alone decides
    session = idle(guard, 30_000)
    await guard.close_session(session, CloseReason.COMPLETED)
    assert guard.projection is not None
    assert guard.projection.expected_session_bytes == 30_000
    guard.sample_now()  # reservations start from this sample
    verdicts = [guard.admit() for _ in range(4)]
    assert verdicts == [None, None, "memory_pressure", "memory_pressure"]  # 910k; 940k > 920k
    guard.sample_now()
    assert guard.admit() is None
    assert guard.status()["admission_projection"]["admitted_since_sample"] == 1


def test_the_projection_can_be_switched_off() -> None:
    from tests.support.guard import make_guard

    guard = make_guard(admission_projection=False)
    assert guard.projection is None
    assert "admission_projection" not in guard.status()
