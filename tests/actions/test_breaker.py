"""Circuit breakers (llm_guard_sdk/breakers): transitions under a fake clock, registry, status."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from llm_guard_sdk import ConfigError, Guard, GuardConfig
from llm_guard_sdk.breakers import (
    BreakerOpenError,
    Breakers,
    BreakerSettings,
    BreakerState,
    CircuitBreaker,
    classify_failure,
)
from llm_guard_sdk.errors import BackendError, BackendUnavailableError, InvalidRequestError
from tests.support.guard import fake_source

pytestmark = pytest.mark.anyio


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(clock: FakeClock, **overrides: float) -> CircuitBreaker:
    values: dict[str, Any] = {"failures": 3, "window": 10.0, "open_for": 5.0, "probes": 1}
    return CircuitBreaker("fake", BreakerSettings(**(values | overrides)), clock=clock)


def state(breaker: CircuitBreaker) -> BreakerState:
    """The state, read through a call so the type checker does not narrow it between reads."""
    return breaker.state


def test_opens_after_n_failures_within_the_window() -> None:
    clock = FakeClock()
    breaker = make(clock)
    for _ in range(2):
        breaker.record_failure()
        assert state(breaker) is BreakerState.CLOSED and breaker.allow()
    breaker.record_failure("timeout")
    assert state(breaker) is BreakerState.OPEN
    assert breaker.opened_total == 1
    assert breaker.failures_total == {"error": 2, "timeout": 1}


def test_failures_spread_wider_than_the_window_never_open_it() -> None:
    clock = FakeClock()
    breaker = make(clock)
    for _ in range(20):  # 20 failures, but never 3 within 10 s: a rate, not a count since start
        breaker.record_failure()
        clock.now += 6.0
    assert state(breaker) is BreakerState.CLOSED
    assert breaker.failures_in_window() == 1
    assert breaker.opened_total == 0


def test_open_refuses_with_the_remaining_time() -> None:
    clock = FakeClock()
    breaker = make(clock)
    breaker.trip()
    clock.now += 2.0
    assert not breaker.allow() and not breaker.allow()
    assert breaker.retry_after() == pytest.approx(3.0)
    assert breaker.refused_total == 2
    assert breaker.status()["state"] == "open"


async def test_guarded_refuses_without_calling_the_backend() -> None:
    clock = FakeClock()
    breaker = make(clock)
    breaker.trip()
    clock.now += 0.5
    calls = 0
    with pytest.raises(BreakerOpenError) as info:
        async with breaker.guarded():
            calls += 1
    assert calls == 0
    assert info.value.status == 503 and isinstance(info.value, BackendUnavailableError)
    assert info.value.headers() == {"retry-after": "5"}  # 4.5 s left, rounded up


def test_half_open_lets_probes_through_and_closes_on_success() -> None:
    clock = FakeClock()
    breaker = make(clock, probes=2)
    breaker.trip()
    clock.now += 5.0
    assert state(breaker) is BreakerState.HALF_OPEN
    assert breaker.allow() and breaker.allow()
    assert not breaker.allow()  # both probes are out
    assert breaker.retry_after() == 1.0
    breaker.record_success()
    assert state(breaker) is BreakerState.HALF_OPEN  # one of two
    breaker.record_success()
    assert state(breaker) is BreakerState.CLOSED
    assert breaker.failures_in_window() == 0  # a fresh start after recovering


def test_a_failed_probe_opens_it_again() -> None:
    clock = FakeClock()
    breaker = make(clock)
    breaker.trip()
    clock.now += 5.0
    assert breaker.allow()
    breaker.record_failure()
    assert state(breaker) is BreakerState.OPEN
    assert breaker.opened_total == 2
    assert breaker.retry_after() == pytest.approx(5.0)


def test_trip_while_open_restarts_the_open_time_only() -> None:
    clock = FakeClock()
    breaker = make(clock)
    breaker.trip()
    clock.now += 4.0
    breaker.trip()
    assert breaker.opened_total == 1
    assert breaker.retry_after() == pytest.approx(5.0)


async def test_a_cancelled_probe_frees_its_slot() -> None:
    clock = FakeClock()
    breaker = make(clock)
    breaker.trip()
    clock.now += 5.0
    with pytest.raises(asyncio.CancelledError):
        async with breaker.guarded():
            raise asyncio.CancelledError
    assert state(breaker) is BreakerState.HALF_OPEN
    async with breaker.guarded():
        pass
    assert state(breaker) is BreakerState.CLOSED


class EngineDeadError(RuntimeError):
    """Named like vLLM's; the classifier matches the name, never importing vLLM."""


@pytest.mark.parametrize(("exc", "kind"), [
    (EngineDeadError("engine core died"), "dead"),
    (ConnectionRefusedError(), "dead"),
    (TimeoutError(), "timeout"),
    (BackendUnavailableError("down"), "error"),
    (RuntimeError("boom"), "error"),
    (InvalidRequestError("prompt too long"), None),
    (asyncio.CancelledError(), None),
])
def test_classify_failure(exc: BaseException, kind: str | None) -> None:
    assert classify_failure(exc) == kind


async def test_a_dead_engine_trips_at_once() -> None:
    clock = FakeClock()
    breaker = make(clock)
    with pytest.raises(EngineDeadError):
        async with breaker.guarded():
            raise EngineDeadError
    assert state(breaker) is BreakerState.OPEN
    assert breaker.last_failure == "dead"


async def test_a_bad_request_is_not_the_backends_fault() -> None:
    clock = FakeClock()
    breaker = make(clock, failures=1)
    with pytest.raises(BackendError):
        async with breaker.guarded():
            raise InvalidRequestError("bad sampling parameters")
    assert state(breaker) is BreakerState.CLOSED and breaker.failures_in_window() == 0


def test_transitions_are_logged(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    breaker = make(clock)
    with caplog.at_level(logging.INFO, logger="llm_guard_sdk"):
        breaker.trip()
        clock.now += 5.0
        assert breaker.allow()
        breaker.record_success()
    levels = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [lvl for lvl, _ in levels] == [logging.WARNING, logging.INFO, logging.INFO]
    assert "closed -> open" in levels[0][1] and "open -> half_open" in levels[1][1]
    assert "half_open -> closed" in levels[2][1]


def test_bad_names_and_settings_fail_clearly(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="1 to 64 characters"):
        CircuitBreaker("")
    with pytest.raises(ConfigError, match=r"LLM_GUARD_BREAKER_FAILURES='0' is invalid"):
        BreakerSettings.from_env({"LLM_GUARD_BREAKER_FAILURES": "0"})
    with pytest.raises(ConfigError, match=r"LLM_GUARD_BREAKER_OPEN_FOR='-1' is invalid"):
        BreakerSettings.from_env({"LLM_GUARD_BREAKER_OPEN_FOR": "-1"})
    assert BreakerSettings.from_env({"LLM_GUARD_BREAKER_FAILURE": "3"}) == \
        BreakerSettings.defaults()  # a misspelt variable warns (with a hint), and is ignored
    assert "did you mean LLM_GUARD_BREAKER_FAILURES?" in caplog.text


def test_registry_keeps_one_breaker_per_backend_in_status() -> None:
    clock = FakeClock()
    guard = Guard(GuardConfig.defaults(sources=("process",)), sources=[fake_source()],
                  extensions=[Breakers(BreakerSettings(failures=1), clock=clock)])
    breakers = Breakers.of(guard)
    assert breakers is guard.extension("breakers")
    first = breakers.get("vllm")
    assert breakers.get("vllm") is first and "vllm" in breakers
    breakers.get("remote").trip()
    with pytest.raises(ValueError, match="exists already"):
        breakers.add(CircuitBreaker("vllm"))
    section = guard.status()["breakers"]
    assert section["vllm"]["state"] == "closed"
    assert section["remote"] == {
        "state": "open", "failures_in_window": 1, "opened_total": 1, "refused_total": 0,
        "failures_total": {"dead": 1}, "last_failure": "dead", "retry_after": 15.0}


def test_breakers_by_name_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_GUARD_BREAKER_FAILURES", "2")
    guard = Guard(GuardConfig.defaults(sources=("process",)), sources=[fake_source()])
    assert Breakers.of(guard).get("x").settings.failures == 2
