"""The sampler isolates each source: a failing one is stale after a few reads, never freezes."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from llm_guard_sdk.monitors.base import Reading
from llm_guard_sdk.monitors.sampler import STALE_AFTER, Sampler
from llm_guard_sdk.policy import Level
from tests.support.guard import EVICT, NORMAL, SHED, fake_source, make_guard
from tests.support.sources import FakeSource


@dataclass
class Broken(FakeSource):
    """A FakeSource that raises ``error`` on every read while ``error`` is set."""

    error: Exception | None = None

    def read(self) -> Reading:
        if self.error is not None:
            self.reads += 1
            raise self.error
        return super().read()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_spike_then_key_error_does_not_freeze_the_level_at_shed() -> None:
    """Issue 9 A5: a spike to shed, then KeyError on each read, left the guard shedding."""
    spiky = Broken(SHED, 1_000_000, "vllm_kv")
    guard = make_guard(spiky)
    guard.add_source(fake_source(NORMAL, name="process_fake"))
    guard.sample_now()
    assert guard.policy.level is Level.SHED
    spiky.error = KeyError("kv_cache_usage")
    levels = []
    for _ in range(STALE_AFTER):
        guard.sample_now()  # never raises
        levels.append(guard.policy.level)
    # The last good reading holds for the first failures, then the source is dropped.
    assert levels == [Level.SHED] * (STALE_AFTER - 1) + [Level.NORMAL]
    memory = guard.status()["memory"]
    assert memory["source"] == "process_fake"
    entry = memory["sources"]["vllm_kv"]
    assert entry["stale"] is True and entry["errors_total"] == STALE_AFTER
    assert entry["pressure"] is None and entry["last_error"] == "KeyError: 'kv_cache_usage'"
    assert memory["sources"]["process_fake"]["stale"] is False


def test_a_failing_source_never_stops_the_others() -> None:
    bad, good = Broken(0, 1000, "bad", error=RuntimeError("boom")), fake_source(EVICT)
    sampler = Sampler([bad, good], 1_000_000)
    assert sampler.read() == pytest.approx(0.9)
    assert sampler.worst_source == "fake" and list(sampler.readings) == ["fake"]
    assert sampler.health["bad"].errors_total == 1


def test_a_stale_source_counts_again_once_it_reads(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "llm_guard_sdk")
    source = Broken(900, 1000, "flaky", error=OSError("gone"))
    sampler = Sampler([source], None)
    for _ in range(STALE_AFTER):
        sampler.read()
    assert sampler.health["flaky"].stale and sampler.pressure == 0.0
    source.error = None
    assert sampler.read() == pytest.approx(0.9)
    health = sampler.health["flaky"]
    assert (health.stale, health.failures_in_row, health.errors_total) == (False, 0, STALE_AFTER)
    messages = [r.getMessage() for r in caplog.records]
    assert any("flaky is stale after 3 failed reads" in m for m in messages)
    assert any("flaky reads again" in m for m in messages)


def test_failures_are_logged_at_most_once_per_interval_per_source(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "llm_guard_sdk")
    clock = Clock()
    source = Broken(0, 1000, "bad", error=ValueError("x"))
    sampler = Sampler([source], None, stale_after=1000, clock=clock)
    for _ in range(50):
        sampler.read()
        clock.now += 0.01  # 50 reads in half a second
    failed = [r.getMessage() for r in caplog.records if "source bad failed" in r.getMessage()]
    assert len(failed) == 1
    clock.now += 5
    sampler.read()  # the interval passed: one summary of what was suppressed
    failed = [r.getMessage() for r in caplog.records if "source bad failed" in r.getMessage()]
    assert len(failed) == 2 and "50 more" in failed[1] and "ValueError=50" in failed[1]
    assert sampler.health["bad"].errors_total == 51


def test_base_exceptions_are_not_swallowed() -> None:
    source = Broken(0, 1000, "bad", error=None)
    sampler = Sampler([source], None)

    class Stop(BaseException):
        pass

    source.error = Stop()  # type: ignore[assignment]
    with pytest.raises(Stop):
        sampler.read()
