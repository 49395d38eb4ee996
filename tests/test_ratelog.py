"""RateLimitedLog: one line at once, then one summary per interval (fake clock, no waiting)."""

from __future__ import annotations

import logging

import pytest

from llm_guard_sdk.ratelog import RateLimitedLog

LOGGER = logging.getLogger("llm_guard_sdk.test_ratelog")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER.name]


def test_first_event_is_written_in_full(caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = RateLimitedLog(LOGGER, "shed", clock=clock)
    assert log.event("memory_pressure", "shed %s", "/chat", extra={"llm_guard_reason": "x"})
    assert lines(caplog) == ["shed /chat"]
    assert caplog.records[0].llm_guard_reason == "x"  # type: ignore[attr-defined]
    assert caplog.records[0].levelno == logging.WARNING


def test_a_burst_becomes_one_summary_per_interval(
        caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = RateLimitedLog(LOGGER, "shed", interval=5.0, clock=clock)
    log.event("memory_pressure", "first")
    for i in range(1000):
        clock.now += 0.004  # 1000 events in 4 s
        log.event("memory_pressure" if i % 4 else "max_sessions", "x", example=f"s{i}")
    assert lines(caplog) == ["first"]
    assert not log.flush()  # still inside the interval
    clock.now += 1.0
    assert log.flush()
    (summary,) = lines(caplog)[1:]
    assert summary == ("llm-guard shed 1000 more in the last 5.0 s: max_sessions=250, "
                       "memory_pressure=750 (e.g. s0, s1, s2)")
    assert not log.flush()  # nothing left
    assert log.lines_total == 2


def test_events_after_the_interval_are_summarised_not_doubled(
        caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = RateLimitedLog(LOGGER, "evicted", interval=5.0, clock=clock)
    log.event("evicted", "one")
    clock.now += 1
    log.event("evicted", "two")  # counted
    clock.now += 5
    assert not log.event("idle_timeout", "three")  # joins the summary, which is written now
    assert lines(caplog) == ["one", "llm-guard evicted 2 more in the last 6.0 s: "
                                    "evicted=1, idle_timeout=1"]


def test_a_quiet_period_resets_to_full_lines(
        caplog: pytest.LogCaptureFixture, clock: Clock) -> None:
    caplog.set_level(logging.INFO, LOGGER.name)
    log = RateLimitedLog(LOGGER, "shed", interval=5.0, clock=clock)
    log.event("a", "one")
    clock.now += 60
    assert log.event("a", "two")
    assert lines(caplog) == ["one", "two"]
