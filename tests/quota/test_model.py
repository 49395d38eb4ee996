"""The quota model: least squares on known data, refusals, and the capacity arithmetic."""

from __future__ import annotations

import math

import pytest

from llm_guard_sdk.quota import MIN_OBSERVATIONS, Observation, QuotaFit, QuotaFitError, fit
from tests.support.quota import ALPHA, BETA, GAMMA, synthetic


def test_recovers_known_parameters_from_noisy_data_within_5_percent() -> None:
    rows = synthetic(noise=2 * 2**20)  # 2 MiB of noise on 1 GiB + up to 230 MiB of load
    model = fit(rows)
    assert model.alpha == pytest.approx(ALPHA, rel=0.05)
    assert model.beta == pytest.approx(BETA, rel=0.05)
    assert model.gamma == pytest.approx(GAMMA, rel=0.05)
    assert model.n == len(rows) and model.target == "process"
    assert 0.99 < model.r_squared <= 1.0
    # The residual standard error estimates the noise it was given.
    assert model.residual_std_error == pytest.approx(2 * 2**20, rel=0.5)


def test_exact_data_fits_exactly() -> None:
    model = fit(synthetic(noise=0.0))
    assert model.alpha == pytest.approx(ALPHA, rel=1e-6)
    assert model.beta == pytest.approx(BETA, rel=1e-6)
    assert model.gamma == pytest.approx(GAMMA, rel=1e-6)
    assert model.r_squared == pytest.approx(1.0)


def test_held_target_fits_the_held_bytes() -> None:
    model = fit(synthetic(noise=0.0), target="held")
    assert model.target == "held"
    assert model.alpha == pytest.approx(ALPHA, rel=1e-3)
    assert abs(model.gamma) < 1e-3 * 2**20


@pytest.mark.parametrize("count", [0, 1, MIN_OBSERVATIONS - 1])
def test_refuses_too_little_data(count: int) -> None:
    with pytest.raises(QuotaFitError) as raised:
        fit(synthetic(noise=0.0)[:count])
    message = str(raised.value)
    assert f"{count} observation(s)" in message
    assert "QPS" in message and "context length" in message


def test_refuses_constant_rate() -> None:
    rows = [Observation(5.0, tokens, 10**9 + tokens) for tokens in (100, 200, 400, 800, 1600, 3200)]
    with pytest.raises(QuotaFitError, match="QPS is constant"):
        fit(rows)


def test_refuses_constant_context() -> None:
    rows = [Observation(qps, 512.0, 10**9 + int(qps)) for qps in range(1, 9)]
    with pytest.raises(QuotaFitError, match="context length L is constant"):
        fit(rows)


def test_refuses_when_rate_and_context_cannot_be_separated() -> None:
    # Two context lengths, each always at one rate: QPS·L and sqrt(L) take two values together.
    rows = [Observation(1.0, 100.0, 10**9), Observation(4.0, 400.0, 2 * 10**9)] * 4
    with pytest.raises(QuotaFitError, match="move together"):
        fit(rows)


def test_bad_target_and_bad_observations_are_refused() -> None:
    with pytest.raises(ValueError, match="target"):
        fit(synthetic(noise=0.0), target="rss")
    with pytest.raises(ValueError, match="'qps'"):
        Observation(qps=-1.0, context_tokens=1.0, peak_process_bytes=1)
    with pytest.raises(ValueError, match="'peak_process_bytes'"):
        Observation(qps=1.0, context_tokens=1.0, peak_process_bytes=math.nan)  # type: ignore[arg-type]


MODEL = QuotaFit(alpha=10.0, beta=1000.0, gamma=1_000_000.0, r_squared=1.0,
                 residual_std_error=0.0, n=10)


def test_predict() -> None:
    assert MODEL.predict(0, 0) == 1_000_000
    assert MODEL.predict(20, 400) == 10 * 20 * 400 + 1000 * 20 + 1_000_000
    with pytest.raises(ValueError, match="qps"):
        MODEL.predict(-1, 400)
    with pytest.raises(ValueError, match="context_tokens"):
        MODEL.predict(1, math.inf)


def test_capacity_under_the_evict_threshold() -> None:
    # budget 0.5 * 4e6 = 2e6; base at L=400: 1000*20 + 1e6 = 1.02e6; headroom 0.98e6;
    # QPS* = 0.98e6 / (10 * 400) = 245 req/s; sessions = 245 * 2 s = 490; each 10*400/2 = 2000 B.
    capacity = MODEL.capacity(4_000_000, 0.5, context_tokens=400, session_seconds=2.0)
    assert capacity.budget_bytes == 2_000_000
    assert capacity.base_bytes == 1_020_000
    assert capacity.max_qps == pytest.approx(245.0)
    assert capacity.per_session_bytes == 2000
    assert capacity.sessions == 490
    assert MODEL.sessions_that_fit(4_000_000, 0.5, context_tokens=400, session_seconds=2.0) == 490
    # The prediction at the capacity sits on the budget.
    assert MODEL.predict(capacity.max_qps or 0, 400) == pytest.approx(capacity.budget_bytes)


def test_capacity_when_the_baseline_alone_passes_the_budget() -> None:
    capacity = MODEL.capacity(1_000_000, 0.85, context_tokens=400, session_seconds=2.0)
    assert capacity.max_qps == 0 and capacity.sessions == 0


def test_capacity_is_unbounded_when_memory_does_not_grow_with_load() -> None:
    flat = QuotaFit(alpha=-1.0, beta=0.0, gamma=100.0, r_squared=0.1, residual_std_error=1.0, n=8)
    capacity = flat.capacity(1000, 0.85, context_tokens=400, session_seconds=2.0)
    assert capacity.sessions is None and capacity.max_qps is None
    assert capacity.per_session_bytes is None


@pytest.mark.parametrize(("limit", "evict_at", "seconds"),
                         [(0, 0.85, 1.0), (1000, 0.0, 1.0), (1000, 1.5, 1.0), (1000, 0.85, 0.0)])
def test_capacity_refuses_bad_arguments(limit: float, evict_at: float, seconds: float) -> None:
    with pytest.raises(ValueError):
        MODEL.capacity(limit, evict_at, context_tokens=400, session_seconds=seconds)
