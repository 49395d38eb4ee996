"""Admission headroom (headroom.py): reservations between samples, the expected session size."""

from __future__ import annotations

import pytest

from llm_guard_sdk.headroom import Headroom

MIB = 2**20


def test_no_projection_before_a_session_was_measured_or_without_a_limit() -> None:
    headroom = Headroom()
    headroom.sampled(400 * MIB, 512 * MIB)
    assert headroom.projected_pressure() is None  # nothing measured: the level alone decides
    headroom.observe(8 * MIB)
    headroom.sampled(400 * MIB, None)
    assert headroom.projected_pressure() is None


def test_each_admission_reserves_the_expected_size_until_the_next_sample() -> None:
    headroom = Headroom()
    headroom.observe(8 * MIB)
    headroom.sampled(448 * MIB, 512 * MIB)
    assert headroom.projected_pressure() == pytest.approx(456 / 512)  # the next one included
    for _ in range(3):
        headroom.admitted()
    assert headroom.admitted_since_sample == 3
    assert headroom.reserved_bytes == 24 * MIB
    assert headroom.projected_pressure() == pytest.approx((448 + 4 * 8) / 512)
    assert headroom.projected_pressure(extra_sessions=0) == pytest.approx(472 / 512)
    headroom.sampled(472 * MIB, 512 * MIB)  # the sample sees what they took: reservations end
    assert headroom.admitted_since_sample == 0
    assert headroom.projected_pressure(extra_sessions=0) == pytest.approx(472 / 512)


def test_expected_size_is_the_largest_in_the_window_and_forgets_old_ones() -> None:
    headroom = Headroom(window=3)
    headroom.observe(0)  # unmeasured sessions say nothing
    assert headroom.expected_session_bytes == 0
    for size in (2 * MIB, 8 * MIB, 1 * MIB):
        headroom.observe(size)
    assert headroom.expected_session_bytes == 8 * MIB
    headroom.observe(1 * MIB)  # 2 MiB leaves; 8 MiB still in
    assert headroom.expected_session_bytes == 8 * MIB
    headroom.observe(3 * MIB)  # 8 MiB leaves: the largest of (1, 1, 3)
    assert headroom.expected_session_bytes == 3 * MIB
    headroom.observe(1 * MIB)
    headroom.observe(1 * MIB)
    headroom.observe(1 * MIB)
    assert headroom.expected_session_bytes == 1 * MIB


def test_section_reports_the_reservation() -> None:
    headroom = Headroom()
    assert headroom.section()["projected_pressure"] is None
    headroom.observe(4 * MIB)
    headroom.sampled(100 * MIB, 200 * MIB)
    headroom.admitted()
    assert headroom.section() == {"expected_session_bytes": 4 * MIB, "admitted_since_sample": 1,
                                  "reserved_bytes": 4 * MIB, "projected_pressure": 0.54}


def test_window_must_hold_one_session() -> None:
    with pytest.raises(ValueError, match="window must be >= 1"):
        Headroom(window=0)
