"""The quantile estimator (actions/latency.py) against known distributions, and its windows."""

from __future__ import annotations

import math
import random

import pytest

from llm_guard_sdk.actions.latency import LogHistogram, RollingQuantile

ACCURACY = 0.01
QS = (0.5, 0.9, 0.99, 0.999)


def exact(values: list[float], q: float) -> float:
    """Nearest-rank quantile of the sample itself: what the histogram approximates."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def draws(name: str, n: int = 50_000) -> list[float]:
    rng = random.Random(1234)
    if name == "exponential":
        return [rng.expovariate(1 / 0.8) for _ in range(n)]  # mean 0.8 s
    if name == "lognormal":
        return [rng.lognormvariate(-1.0, 1.2) for _ in range(n)]
    # bimodal: most requests fast, a tenth of them slow (a cold cache, a long prompt)
    return [rng.gauss(0.05, 0.01) if rng.random() < 0.9 else rng.gauss(3.0, 0.4)
            for _ in range(n)]


@pytest.mark.parametrize("name", ["exponential", "lognormal", "bimodal"])
def test_quantiles_are_within_the_relative_accuracy(name: str) -> None:
    values = [v for v in draws(name) if 1e-3 < v <= 1e3]
    histogram = LogHistogram(ACCURACY, low=1e-3, high=1e3)
    for v in values:
        histogram.add(v)
    assert histogram.total == len(values)
    for q in QS:
        got, want = histogram.quantile(q), exact(values, q)
        assert got is not None
        assert abs(got - want) / want <= ACCURACY * 1.0001, (q, got, want)


def test_bimodal_p99_lands_in_the_slow_mode() -> None:
    histogram = LogHistogram()
    for v in draws("bimodal"):
        histogram.add(v)
    p50, p99 = histogram.quantile(0.5), histogram.quantile(0.99)
    assert p50 is not None and p99 is not None
    assert p50 < 0.1 < 2.0 < p99


def test_weighted_add_counts_like_repeated_adds() -> None:
    one, many = LogHistogram(), LogHistogram()
    one.add(0.2, 7)
    one.add(3.0)
    for _ in range(7):
        many.add(0.2)
    many.add(3.0)
    assert one.counts == many.counts and one.total == many.total == 8
    assert one.quantile(0.5) == pytest.approx(0.2, rel=ACCURACY)


def test_out_of_range_values_are_clamped_and_nan_does_not_raise() -> None:
    histogram = LogHistogram(low=0.01, high=10.0)
    for v in (0.0, -1.0, 0.001, float("nan")):
        histogram.add(v)
    assert histogram.quantile(1.0) == 0.01
    histogram.add(1e9)
    assert histogram.quantile(1.0) == 10.0


def test_counters_are_preallocated_and_cleared_in_place() -> None:
    histogram = LogHistogram()
    counts, size = histogram.counts, len(histogram.counts)
    for v in draws("exponential", 1000):
        histogram.add(v)
    histogram.clear()
    assert histogram.counts is counts and len(counts) == size
    assert histogram.total == 0 and not any(counts)
    assert histogram.quantile(0.99) is None


def test_quantile_merges_histograms() -> None:
    fast, slow = LogHistogram(), LogHistogram()
    fast.add(0.1, 50)
    slow.add(5.0, 50)
    assert fast.quantile(0.99, slow) == pytest.approx(5.0, rel=ACCURACY)
    assert fast.quantile(0.5, slow) == pytest.approx(0.1, rel=ACCURACY)
    assert fast.quantile(0.99) == pytest.approx(0.1, rel=ACCURACY)  # the others are untouched


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"relative_accuracy": 0}, "relative_accuracy"),
    ({"relative_accuracy": 0.5}, "relative_accuracy"),
    ({"low": 0}, "low"),
    ({"low": 2.0, "high": 1.0}, "low"),
])
def test_bad_histogram_arguments_fail_clearly(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LogHistogram(**kwargs)


def test_bad_quantile_and_window_fail_clearly() -> None:
    with pytest.raises(ValueError, match="q must be"):
        LogHistogram().quantile(1.5)
    with pytest.raises(ValueError, match="window"):
        RollingQuantile(0)


def test_rolling_windows_age_old_behaviour_out() -> None:
    rolling = RollingQuantile(60.0, now=0.0)
    rolling.add(10.0, 100)  # a slow period
    assert not rolling.rotate(59.0)
    assert rolling.rotate(60.0)  # the slow period is now the previous window
    rolling.add(0.5, 100)
    assert rolling.count == 200
    assert rolling.quantile(0.99) == pytest.approx(10.0, rel=ACCURACY)  # still remembered
    assert rolling.rotate(120.0)  # ... and forgotten one window later
    assert rolling.count == 100
    assert rolling.quantile(0.99) == pytest.approx(0.5, rel=ACCURACY)


def test_two_idle_windows_forget_everything() -> None:
    rolling = RollingQuantile(60.0, now=0.0)
    rolling.add(1.0, 10)
    assert rolling.rotate(500.0)
    assert rolling.count == 0 and rolling.quantile(0.5) is None
