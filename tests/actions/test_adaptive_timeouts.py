"""Adaptive timeouts (actions/adaptive.py): samples from ticks, P99 limits, cold start, jitter."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterable
from typing import Any

import pytest

from llm_guard_sdk import Guard, GuardConfig
from llm_guard_sdk.actions import AdaptiveTimeouts, AdaptiveTimeoutSettings, ChunkLimits
from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import CloseReason, Session
from tests.support.guard import FakeStream, cleanup, fake_source, streaming

pytestmark = pytest.mark.anyio

LONG = 1e9  # a window no test outlives: nothing rotates out unless a test says so


def settings(**overrides: object) -> AdaptiveTimeoutSettings:
    values: dict[str, Any] = {"enabled": True, "jitter": 0.0, "min_samples": 10,
                                 "window": LONG}
    return AdaptiveTimeoutSettings(**(values | overrides))


class Feeder:
    """Feeds exact latencies through the tick interface, on a clock the test owns."""

    def __init__(self, adaptive: AdaptiveTimeouts, path: str = "/chat") -> None:
        self.adaptive = adaptive
        self.registry = SessionRegistry(100)
        self.path = path
        self.now = 1000.0

    def tick(self, *pairs: tuple[Session, FakeStream]) -> None:
        self.adaptive.begin_tick(self.now)
        for session, stream in pairs:
            self.adaptive.limit(session, stream, self.now, None)
        self.adaptive.end_tick(self.now)

    def open(self, started_at: float) -> tuple[Session, FakeStream]:
        session = self.registry.open("http", self.path)
        stream = FakeStream("s")
        stream.started_at = started_at
        return session, stream

    def first_tokens(self, values: Iterable[float]) -> None:
        """One stream per value, whose first chunk came exactly ``value`` after it opened."""
        for value in values:
            self.now += 1.0
            session, stream = self.open(self.now - value)
            stream.chunks = 1
            self.tick((session, stream))

    def gaps(self, values: Iterable[float]) -> None:
        """One stream producing a chunk per tick, the ticks ``value`` apart.

        Its first chunk comes at once (a first-token sample of 0), so every value is a gap.
        """
        session, stream = self.open(self.now)
        stream.chunks = 1
        self.tick((session, stream))
        for value in values:
            self.now += value
            stream.chunks += 1
            self.tick((session, stream))

    def refresh(self) -> None:
        self.now += 10.0  # past the once-a-second refresh
        self.tick()

    def limit(self, *, chunks: int, static: float | None = None) -> float | None:
        session, stream = self.open(self.now)
        stream.chunks = chunks
        return self.adaptive.limit(session, stream, self.now, static)


def exponential(n: int, *, mean: float, seed: int = 3) -> list[float]:
    rng = random.Random(seed)
    return [rng.expovariate(1 / mean) for _ in range(n)]


def lognormal(n: int, *, mu: float, sigma: float, seed: int = 5) -> list[float]:
    rng = random.Random(seed)
    return [rng.lognormvariate(mu, sigma) for _ in range(n)]


def p99_of(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.99 * len(ordered) + 0.999999) - 1]


# -- samples and limits -------------------------------------------------------------------------


def test_one_tick_of_chunks_shares_its_time_and_the_rest_goes_to_the_first() -> None:
    adaptive = AdaptiveTimeouts(settings())
    feeder = Feeder(adaptive)
    session, stream = feeder.open(started_at=feeder.now)
    stream.waiting = True
    feeder.now += 0.25
    feeder.tick((session, stream))  # nothing yet
    feeder.now += 0.25
    stream.chunks = 5
    feeder.tick((session, stream))  # 5 chunks in the second tick
    route = adaptive.routes[("/chat", None)]
    assert route.first_token.quantiles.count == 1
    assert route.inter_chunk.quantiles.count == 4
    assert route.first_token.quantiles.quantile(1.0) == pytest.approx(0.30, rel=0.01)
    assert route.inter_chunk.quantiles.quantile(1.0) == pytest.approx(0.05, rel=0.01)


def test_a_stall_is_one_long_gap() -> None:
    adaptive = AdaptiveTimeouts(settings())
    feeder = Feeder(adaptive)
    session, stream = feeder.open(started_at=feeder.now)
    for chunks, step in ((1, 0.25), (2, 0.25), (2, 0.25), (2, 0.25), (3, 0.25)):
        feeder.now += step
        stream.chunks = chunks
        feeder.tick((session, stream))
    gaps = adaptive.routes[("/chat", None)].inter_chunk.quantiles
    assert gaps.count == 2
    assert gaps.quantile(0.0) == pytest.approx(0.25, rel=0.01)
    assert gaps.quantile(1.0) == pytest.approx(0.75, rel=0.01)  # stalled across three ticks


@pytest.mark.parametrize(("values", "expected"), [
    (exponential(2000, mean=1.5), None),  # p99 ~ 6.9 s -> 1.5 x p99, inside the clamp
    ([0.05] * 500, 2.0),  # fast: clamped up to min_timeout
    (lognormal(2000, mu=3.0, sigma=1.0), 45.0),  # very slow: clamped down to max_timeout
])
def test_first_token_timeout_from_a_known_distribution(values: list[float],
                                                      expected: float | None) -> None:
    adaptive = AdaptiveTimeouts(settings())
    feeder = Feeder(adaptive)
    feeder.first_tokens(values)
    feeder.refresh()
    want = expected if expected is not None else 1.5 * p99_of(values)
    assert feeder.limit(chunks=0) == pytest.approx(want, rel=0.011)
    assert feeder.limit(chunks=3, static=7.0) == 7.0  # no gaps measured: the static bound


def test_inter_chunk_timeout_from_a_known_distribution() -> None:
    values = exponential(3000, mean=0.9, seed=7)
    adaptive = AdaptiveTimeouts(settings(p99_factor=2.0, max_timeout=60))
    feeder = Feeder(adaptive)
    feeder.gaps(values)
    feeder.refresh()
    status = adaptive.status()["routes"]["/chat"]["inter_chunk"]
    assert status["samples"] == len(values) and status["source"] == "adaptive"
    assert status["p99"] == pytest.approx(p99_of(values), rel=0.011)
    assert feeder.limit(chunks=2) == pytest.approx(2.0 * p99_of(values), rel=0.011)


def test_cold_start_uses_the_static_bound_until_min_samples() -> None:
    adaptive = AdaptiveTimeouts(settings(min_samples=100))
    feeder = Feeder(adaptive)
    feeder.first_tokens([0.5] * 99)
    feeder.refresh()
    assert feeder.limit(chunks=0) is None  # today's default: no chunk timeout at all
    assert feeder.limit(chunks=0, static=30.0) == 30.0
    assert adaptive.status()["routes"]["/chat"]["first_token"]["source"] == "static"
    feeder.first_tokens([0.5])
    feeder.refresh()
    assert feeder.limit(chunks=0, static=30.0) == 2.0


def test_jitter_stays_within_its_bound_and_follows_the_seed() -> None:
    def limits(seed: int) -> list[float]:
        adaptive = AdaptiveTimeouts(settings(jitter=0.5), rng=random.Random(seed))
        feeder = Feeder(adaptive)
        feeder.first_tokens([3.0] * 20)
        feeder.refresh()
        base = adaptive.routes[("/chat", None)].first_token.timeout
        assert base is not None and base == pytest.approx(4.5, rel=0.011)  # 1.5 x p99, unjittered
        found = [feeder.limit(chunks=0) for _ in range(200)]
        assert all(x is not None and base <= x <= base + 0.5 for x in found)
        return [x - base for x in found if x is not None]

    first = limits(42)
    assert max(first) - min(first) > 0.4  # spread over the range, not one value
    assert limits(42) == first and limits(43) != first


def test_one_stream_keeps_its_jitter_across_ticks() -> None:
    adaptive = AdaptiveTimeouts(settings(jitter=0.5), rng=random.Random(1))
    feeder = Feeder(adaptive)
    feeder.first_tokens([3.0] * 20)
    feeder.refresh()
    session, stream = feeder.open(feeder.now)
    got = {adaptive.limit(session, stream, feeder.now + i, None) for i in range(5)}
    assert len(got) == 1


def test_old_latencies_age_out_after_two_windows() -> None:
    adaptive = AdaptiveTimeouts(settings(window=100.0))
    feeder = Feeder(adaptive)
    feeder.first_tokens([20.0] * 50)  # a slow period
    feeder.refresh()
    assert feeder.limit(chunks=0) == pytest.approx(30.0, rel=0.011)
    feeder.now += 100.0
    feeder.first_tokens([1.0] * 50)
    feeder.refresh()
    assert feeder.limit(chunks=0) == pytest.approx(30.0, rel=0.011)  # still the previous window
    feeder.now += 100.0
    feeder.first_tokens([1.0] * 50)
    feeder.refresh()
    assert feeder.limit(chunks=0) == 2.0


def test_keys_are_bounded_and_a_raising_tenant_function_is_counted() -> None:
    def tenant(session: Session) -> str | None:
        if session.path == "/boom":
            raise RuntimeError("bad header")
        return "acme" if session.path == "/chat" else None

    adaptive = AdaptiveTimeouts(settings(max_keys=2), tenant=tenant)
    for path in ("/chat", "/boom", "/third", "/fourth"):
        Feeder(adaptive, path).first_tokens([0.1])
    assert list(adaptive.routes) == [("/chat", "acme"), ("/boom", None), ("(other)", None)]
    assert adaptive.tenant_errors_total == 1
    assert set(adaptive.status()["routes"]) == {"/chat tenant=acme", "/boom", "(other)"}


def test_ended_streams_are_forgotten() -> None:
    adaptive = AdaptiveTimeouts(settings())
    feeder = Feeder(adaptive)
    pair = feeder.open(feeder.now)
    feeder.tick(pair)
    assert adaptive.status()["streams_tracked"] == 1
    feeder.tick()
    assert adaptive.status()["streams_tracked"] == 0


# -- in the guard -------------------------------------------------------------------------------


def guard_with(adaptive: AdaptiveTimeouts, **config: object) -> Guard:
    cfg = GuardConfig.defaults(sources=("process",), memory_limit="1TiB", **config)  # type: ignore[arg-type]
    return Guard(cfg, sources=[fake_source()], extensions=[adaptive])


async def test_the_extension_plugs_into_the_guard_and_its_status() -> None:
    adaptive = AdaptiveTimeouts(settings())
    guard = guard_with(adaptive, chunk_timeout=30)
    limits: ChunkLimits = adaptive
    assert guard.timeouts.limits is limits
    section = guard.status()["timeouts"]
    assert section["adaptive"] is True and section["routes"] == {}
    off = guard_with(AdaptiveTimeouts(settings(enabled=False)))
    assert off.timeouts.limits is None and off.status()["timeouts"]["adaptive"] is False


async def test_by_name_it_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_GUARD_ADAPTIVE_TIMEOUTS", "1")
    guard = Guard(GuardConfig.defaults(sources=("process",)), sources=[fake_source()],
                  extensions=["timeouts"])
    assert isinstance(guard.extension("timeouts"), AdaptiveTimeouts)
    assert guard.timeouts.limits is guard.extension("timeouts")


def warm(adaptive: AdaptiveTimeouts, path: str = "-") -> None:
    """Warm a route with fast gaps, on clock readings well in the past."""
    feeder = Feeder(adaptive, path)
    feeder.now = time.monotonic() - 10_000
    feeder.gaps([0.05] * 50)
    feeder.refresh()


async def test_a_stalled_stream_is_closed_at_the_adaptive_limit() -> None:
    adaptive = AdaptiveTimeouts(settings())
    guard = guard_with(adaptive)  # no static chunk_timeout: only the adaptive one can fire
    warm(adaptive)
    item = await streaming(guard, 10)  # one chunk out, blocked on the second
    assert await guard.timeouts.run() == 0  # the stall clock starts at this tick
    item.stream.stuck_since -= 1.9
    assert await guard.timeouts.run() == 0  # under min_timeout (2 s)
    item.stream.stuck_since -= 0.2
    assert await guard.timeouts.run() == 1
    assert await asyncio.wait_for(item.task, 5) == "ended"
    assert item.stream.close_reason is CloseReason.TIMEOUT
    assert item.finalized == [True]  # the generator was closed
    assert guard.registry.counters.streams_aborted_total == 1
    await cleanup(guard)


async def test_a_cold_route_keeps_todays_no_timeout() -> None:
    adaptive = AdaptiveTimeouts(settings())
    guard = guard_with(adaptive)
    item = await streaming(guard, 10)
    assert await guard.timeouts.run() == 0
    item.stream.stuck_since -= 1000
    assert await guard.timeouts.run() == 0
    assert not item.stream.closed
    await cleanup(guard, item)
