from __future__ import annotations

import pytest

from llm_guard_sdk.monitors.base import Reading
from llm_guard_sdk.policy import Level, Thresholds, WatermarkPolicy, highest_pressure

# Defaults of GuardConfig; hysteresis band 0.05.
T = Thresholds(warn=0.75, evict=0.85, shed=0.92, hysteresis=0.05)


def make() -> WatermarkPolicy:
    return WatermarkPolicy(T)


def feed(policy: WatermarkPolicy, series: list[float]) -> list[Level]:
    return [policy.update(p) for p in series]


def changes(levels: list[Level], start: Level = Level.NORMAL) -> int:
    count, prev = 0, start
    for level in levels:
        if level != prev:
            count += 1
        prev = level
    return count


# -- Level ---------------------------------------------------------------------------------


def test_level_ordering() -> None:
    assert Level.NORMAL < Level.WARN < Level.EVICT < Level.SHED
    assert sorted([Level.SHED, Level.NORMAL, Level.EVICT, Level.WARN]) == [
        Level.NORMAL, Level.WARN, Level.EVICT, Level.SHED,
    ]
    assert Level.SHED >= Level.EVICT
    assert not (Level.WARN >= Level.EVICT)
    assert max(Level.WARN, Level.SHED, Level.EVICT) is Level.SHED


def test_level_labels() -> None:
    assert [lv.label for lv in Level] == ["normal", "warn", "evict", "shed"]


def test_thresholds_of() -> None:
    assert T.of(Level.NORMAL) == 0.0
    assert T.of(Level.WARN) == 0.75
    assert T.of(Level.EVICT) == 0.85
    assert T.of(Level.SHED) == 0.92


# -- transitions up ------------------------------------------------------------------------


def test_starts_normal() -> None:
    assert make().level is Level.NORMAL


@pytest.mark.parametrize(
    ("pressure", "expected"),
    [
        (0.0, Level.NORMAL),
        (0.5, Level.NORMAL),
        (0.74, Level.NORMAL),
        (0.75, Level.WARN),
        (0.80, Level.WARN),
        (0.85, Level.EVICT),
        (0.91, Level.EVICT),
        (0.92, Level.SHED),
        (1.5, Level.SHED),
    ],
)
def test_fresh_policy_maps_pressure_to_level(pressure: float, expected: Level) -> None:
    policy = make()
    assert policy.update(pressure) is expected
    assert policy.level is expected


def test_rising_pressure_steps_through_every_level() -> None:
    policy = make()
    levels = feed(policy, [0.5, 0.76, 0.80, 0.86, 0.90, 0.93, 0.99])
    assert levels == [
        Level.NORMAL, Level.WARN, Level.WARN, Level.EVICT, Level.EVICT, Level.SHED, Level.SHED,
    ]


def test_entering_a_higher_level_needs_its_full_threshold() -> None:
    # At WARN, the EVICT hysteresis band does not apply: 0.84 is not enough to enter EVICT.
    policy = make()
    policy.update(0.76)
    assert policy.update(0.84) is Level.WARN
    assert policy.update(0.85) is Level.EVICT
    # At EVICT, 0.90 is inside SHED's exit band but SHED was never entered.
    assert policy.update(0.90) is Level.EVICT


# -- hysteresis ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("enter", "level", "inside_band", "below_band", "falls_to"),
    [
        (0.76, Level.WARN, 0.71, 0.69, Level.NORMAL),
        (0.86, Level.EVICT, 0.81, 0.79, Level.WARN),
        (0.93, Level.SHED, 0.88, 0.86, Level.EVICT),
    ],
)
def test_level_left_only_below_threshold_minus_hysteresis(
    enter: float, level: Level, inside_band: float, below_band: float, falls_to: Level
) -> None:
    policy = make()
    assert policy.update(enter) is level
    # Below the threshold but within the band: stays.
    assert policy.update(inside_band) is level
    assert policy.update(inside_band) is level
    assert policy.level is level
    # Clearly below threshold - hysteresis: leaves.
    assert policy.update(below_band) is falls_to
    assert policy.level is falls_to


def test_without_hysteresis_level_drops_immediately() -> None:
    policy = WatermarkPolicy(Thresholds(warn=0.75, evict=0.85, shed=0.92, hysteresis=0.0))
    assert policy.update(0.86) is Level.EVICT
    assert policy.update(0.84) is Level.WARN
    assert policy.update(0.74) is Level.NORMAL


@pytest.mark.parametrize("threshold", [0.75, 0.85, 0.92])
def test_oscillation_around_threshold_does_not_flap(threshold: float) -> None:
    policy = make()
    series = [threshold + (0.01 if i % 2 == 0 else -0.01) for i in range(200)]
    levels = feed(policy, series)
    # Exactly one change: the first crossing; then it stays put.
    assert changes(levels) == 1
    assert len(set(levels)) == 1


def test_oscillation_without_hysteresis_would_flap() -> None:
    # Control: the same series with no band toggles every sample, so the test above is real.
    policy = WatermarkPolicy(Thresholds(warn=0.75, evict=0.85, shed=0.92, hysteresis=0.0))
    series = [0.85 + (0.01 if i % 2 == 0 else -0.01) for i in range(20)]
    assert changes(feed(policy, series)) == 20


def test_oscillation_starting_below_threshold() -> None:
    policy = make()
    series = [0.85 + (-0.01 if i % 2 == 0 else 0.01) for i in range(100)]
    levels = feed(policy, series)
    # NORMAL->WARN at 0.84, WARN->EVICT at 0.86, then steady.
    assert changes(levels) == 2
    assert levels[-1] is Level.EVICT
    assert all(level is Level.EVICT for level in levels[1:])


# -- jumps ---------------------------------------------------------------------------------


def test_jump_normal_to_shed_and_step_back_down() -> None:
    policy = make()
    assert policy.update(0.10) is Level.NORMAL
    assert policy.update(0.97) is Level.SHED  # straight up, skipping warn/evict
    steps = [
        (0.90, Level.SHED),    # inside shed band (>= 0.87)
        (0.86, Level.EVICT),   # below 0.87: leave shed, still >= 0.80
        (0.82, Level.EVICT),
        (0.78, Level.WARN),    # below 0.80: leave evict, >= 0.70
        (0.72, Level.WARN),
        (0.68, Level.NORMAL),  # below 0.70
        (0.72, Level.NORMAL),  # re-entering warn needs the full 0.75
    ]
    for pressure, expected in steps:
        assert policy.update(pressure) is expected, pressure


def test_jump_from_shed_straight_to_normal() -> None:
    policy = make()
    policy.update(0.99)
    assert policy.update(0.10) is Level.NORMAL


def test_evict_target_is_evict_minus_hysteresis() -> None:
    assert make().evict_target() == pytest.approx(0.80)


# -- highest_pressure ----------------------------------------------------------------------


def test_highest_pressure_picks_worst_reading() -> None:
    a = Reading("a", 50, 100)     # 0.5
    b = Reading("b", 90, 100)     # 0.9
    c = Reading("c", 300, 1000)   # 0.3
    pressure, worst = highest_pressure([a, b, c])
    assert worst is b
    assert pressure == pytest.approx(0.9)
    pressure, worst = highest_pressure([c, b, a])
    assert worst is b


def test_highest_pressure_ignores_readings_without_limit() -> None:
    unlimited = Reading("nolimit", 10**12, None)
    zero = Reading("zero", 10**12, 0)
    small = Reading("small", 20, 100)
    pressure, worst = highest_pressure([unlimited, zero, small])
    assert worst is small
    assert pressure == pytest.approx(0.2)


def test_highest_pressure_only_unlimited_or_empty() -> None:
    assert highest_pressure([Reading("x", 123, None)]) == (0.0, None)
    assert highest_pressure([]) == (0.0, None)


def test_highest_pressure_accepts_generator_and_zero_pressure() -> None:
    idle = Reading("idle", 0, 100)
    pressure, worst = highest_pressure(r for r in [idle])
    assert worst is idle
    assert pressure == 0.0
