from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.monitors.base import Reading
from llm_guard_sdk.policy import Level
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import GuardedStream, guard_stream

pytestmark = pytest.mark.anyio

LIMIT = 1_000_000
# Defaults: warn 0.75, evict 0.85, shed 0.92, hysteresis 0.05 -> evict target 0.80.
NORMAL, WARN, EVICT, SHED = 100_000, 780_000, 900_000, 950_000
OLD = 1000.0  # seconds subtracted from created_at to make a session older than min_session_age


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Fake:
    """A MemorySource whose reading the test sets."""

    name = "fake"

    def __init__(self, used: int = NORMAL, limit: int | None = LIMIT) -> None:
        self.used = used
        self.limit = limit
        self.reads = 0

    def read(self) -> Reading:
        self.reads += 1
        return Reading("fake", self.used, self.limit)


def make_guard(fake: Fake, **overrides: Any) -> Guard:
    overrides.setdefault("min_session_age", 30)
    guard = Guard(GuardConfig(sources=("process",), memory_limit="1TiB", **overrides))
    guard.sources[:] = [fake]
    guard.sample_now()
    return guard


def record_closes(sessions: list[Session], log: list[Session]) -> None:
    for session in sessions:
        session.on_close(log.append)


def idle(guard: Guard, size: int = 0, *, old: bool = True) -> Session:
    session = guard.registry.open("websocket")
    session.attached_bytes = size
    if old:
        session.created_at -= OLD
    return session


async def until(predicate: Callable[[], bool]) -> None:
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


@dataclass
class Streaming:
    session: Session
    stream: GuardedStream[bytes]
    task: asyncio.Task[str]
    received: list[bytes] = field(default_factory=list)
    finalized: list[bool] = field(default_factory=list)


async def streaming(guard: Guard, size: int, *, kind: str = "http") -> Streaming:
    """A session with a real guarded stream, blocked waiting for its second chunk."""
    session = guard.registry.open(kind)
    session.created_at -= OLD
    finalized: list[bool] = []
    received: list[bytes] = []
    never = asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        try:
            yield b"x"
            await never.wait()
            yield b"never"
        finally:
            finalized.append(True)

    stream = guard_stream(source(), session=session)

    async def consume() -> str:
        async for chunk in stream:
            received.append(chunk)
        return "ended"

    task = asyncio.create_task(consume())
    await until(lambda: bool(received) and stream.waiting)
    session.backend_bytes = size
    guard.registry.resize(session)
    return Streaming(session, stream, task, received, finalized)


async def cleanup(guard: Guard, *items: Streaming) -> None:
    for session in list(guard.registry):
        await guard.close_session(session, CloseReason.COMPLETED)
    for item in items:
        assert await asyncio.wait_for(item.task, 5) == "ended"


# -- eviction order ------------------------------------------------------------------------


async def test_eviction_order_idle_lru_then_largest_streams() -> None:
    fake = Fake(EVICT)  # pressure 0.90 -> need ~100_000 bytes to reach 0.80
    guard = make_guard(fake)
    assert guard.policy.level is Level.EVICT

    young = idle(guard, 30_000, old=False)  # oldest activity, but too young to evict
    w1, w2, w3 = idle(guard, 30_000), idle(guard, 30_000), idle(guard, 30_000)
    guard.registry.touch(w1)  # LRU now: young, w2, w3, w1
    medium = await streaming(guard, 50_000)
    big = await streaming(guard, 200_000)
    small = await streaming(guard, 1_000)
    log: list[Session] = []
    record_closes([young, w1, w2, w3, medium.session, big.session, small.session], log)

    evicted = await guard.evict()

    # 3 idle sessions free 90_000 < 100_000, so the largest stream goes too; then enough.
    assert log == [w2, w3, w1, big.session]
    assert evicted == 4
    assert not young.closed
    assert not medium.session.closed and not small.session.closed
    assert all(s.close_reason is CloseReason.EVICTED for s in log)

    # The evicted stream's consumer ended quietly and its generator's finally ran.
    assert await asyncio.wait_for(big.task, 5) == "ended"
    assert big.finalized == [True]
    assert big.stream.close_reason is CloseReason.EVICTED
    assert medium.finalized == small.finalized == []
    assert not medium.task.done()

    counters = guard.registry.counters
    assert counters.evicted_total == 4
    assert counters.streams_aborted_total == 1
    assert guard.registry.streams_open == 2
    assert guard.registry.counters.evicted_by_reason == {"evicted": 4}
    status = guard.status()
    assert status["sessions"]["evicted_total"] == 4
    assert status["streams"]["aborted_total"] == 1
    assert status["streams"]["open"] == 2
    await cleanup(guard, medium, small)


async def test_young_idle_sessions_are_spared_even_when_short() -> None:
    guard = make_guard(Fake(EVICT))
    youngs = [idle(guard, 100_000, old=False) for _ in range(3)]
    target = await streaming(guard, 10)
    log: list[Session] = []
    record_closes([*youngs, target.session], log)
    assert await guard.evict() == 1
    assert log == [target.session]
    assert not any(s.closed for s in youngs)
    await cleanup(guard, target)


async def test_min_session_age_zero_evicts_fresh_idle() -> None:
    guard = make_guard(Fake(EVICT), min_session_age=0)
    fresh = idle(guard, 200_000, old=False)
    assert await guard.evict() == 1
    assert fresh.closed


async def test_eviction_stops_once_need_is_covered_by_idle() -> None:
    guard = make_guard(Fake(EVICT))  # need ~100_000
    a, b, c, d = (idle(guard, 60_000) for _ in range(4))
    stream = await streaming(guard, 10_000_000)
    log: list[Session] = []
    record_closes([a, b, c, d, stream.session], log)
    assert await guard.evict() == 2
    assert log == [a, b]  # 120_000 >= need: c, d and the huge stream are spared
    assert not stream.session.closed
    assert stream.finalized == []
    await cleanup(guard, stream)


async def test_eviction_stops_once_need_is_covered_by_streams() -> None:
    guard = make_guard(Fake(EVICT))  # need ~100_000
    s1 = await streaming(guard, 70_000)
    s2 = await streaming(guard, 40_000)
    s3 = await streaming(guard, 30_000)
    s4 = await streaming(guard, 500)
    log: list[Session] = []
    record_closes([s.session for s in (s1, s2, s3, s4)], log)
    assert await guard.evict() == 2
    assert log == [s1.session, s2.session]
    assert await asyncio.wait_for(s1.task, 5) == "ended"
    assert await asyncio.wait_for(s2.task, 5) == "ended"
    assert s1.finalized == s2.finalized == [True]
    assert s3.finalized == s4.finalized == []
    await cleanup(guard, s3, s4)


async def test_need_follows_pressure() -> None:
    # At 0.95 the need is ~150_000: three 60_000 sessions instead of two.
    guard = make_guard(Fake(SHED))
    sessions = [idle(guard, 60_000) for _ in range(5)]
    assert await guard.evict() == 3
    assert [s.closed for s in sessions] == [True, True, True, False, False]


async def test_evict_below_target_or_without_limit_does_nothing() -> None:
    fake = Fake(NORMAL)
    guard = make_guard(fake)
    s = idle(guard, 1_000_000)
    assert await guard.evict() == 0
    fake.used, fake.limit = 10**12, None
    guard.sample_now()
    assert await guard.evict() == 0
    assert not s.closed


async def test_max_evictions_per_tick_caps_a_tick() -> None:
    fake = Fake(EVICT)
    guard = make_guard(fake, max_evictions_per_tick=2)
    sessions = [idle(guard, 1) for _ in range(5)]
    await guard.tick()
    assert [s.closed for s in sessions] == [True, True, False, False, False]
    assert guard.registry.counters.evicted_total == 2
    assert await guard.evict() == 2
    assert [s.closed for s in sessions] == [True, True, True, True, False]


async def test_tick_at_evict_level_evicts_but_not_at_warn() -> None:
    fake = Fake(WARN)
    guard = make_guard(fake)
    s = idle(guard, 1_000_000)
    await guard.tick()
    assert guard.policy.level is Level.WARN
    assert not s.closed
    fake.used = EVICT
    await guard.tick()
    assert guard.policy.level is Level.EVICT
    assert s.closed
    assert s.close_reason is CloseReason.EVICTED


# -- idle timeout --------------------------------------------------------------------------


async def test_idle_timeout_closes_idle_sessions_at_normal_level() -> None:
    guard = make_guard(Fake(NORMAL), idle_timeout=60)
    stale1, fresh, stale2 = idle(guard), idle(guard), idle(guard)
    guard.registry.touch(fresh)  # LRU: stale1, stale2, fresh
    stale1.last_activity -= 200
    stale2.last_activity -= 100
    http = guard.registry.open("http")
    http.last_activity -= 1000  # active sessions never idle-time-out
    log: list[Session] = []
    record_closes([stale1, fresh, stale2, http], log)

    await guard.tick()
    assert guard.policy.level is Level.NORMAL
    assert log == [stale1, stale2]
    assert stale1.close_reason is CloseReason.IDLE_TIMEOUT
    assert not fresh.closed and not http.closed
    assert guard.registry.counters.evicted_total == 2
    assert guard.registry.counters.evicted_by_reason == {"idle_timeout": 2}
    assert guard.status()["sessions"]["idle"] == 1


async def test_idle_timeout_ignores_min_session_age() -> None:
    guard = make_guard(Fake(NORMAL), idle_timeout=10, min_session_age=1000)
    s = idle(guard, old=False)
    s.last_activity -= 20
    await guard.tick()
    assert s.close_reason is CloseReason.IDLE_TIMEOUT


# -- admission -----------------------------------------------------------------------------


async def test_admit() -> None:
    fake = Fake(NORMAL)
    guard = make_guard(fake, max_sessions=2)
    assert guard.admit() is None
    fake.used = EVICT
    guard.sample_now()
    assert guard.admit() is None  # evict level still admits
    fake.used = SHED
    guard.sample_now()
    assert guard.policy.level is Level.SHED
    assert guard.admit() == "memory_pressure"

    fake.used = NORMAL
    guard.sample_now()
    assert guard.admit() is None
    a = guard.registry.open("http")
    assert guard.admit() is None
    guard.registry.open("http")
    assert guard.admit() == "max_sessions"
    fake.used = SHED
    guard.sample_now()
    assert guard.admit() == "memory_pressure"  # pressure is reported first
    fake.used = NORMAL
    guard.sample_now()
    await guard.close_session(a, CloseReason.COMPLETED)
    assert guard.admit() is None


async def test_shed_level_holds_with_hysteresis_for_admit() -> None:
    fake = Fake(SHED)
    guard = make_guard(fake)
    assert guard.admit() == "memory_pressure"
    fake.used = 890_000  # below shed (0.92) but above shed - hysteresis (0.87)
    guard.sample_now()
    assert guard.admit() == "memory_pressure"
    fake.used = 860_000
    guard.sample_now()
    assert guard.admit() is None


async def test_admission_checks_and_record_shed() -> None:
    guard = make_guard(Fake(NORMAL))
    verdict: list[str | None] = [None]
    guard.add_admission_check(lambda: verdict[0])
    assert guard.admit() is None
    verdict[0] = "queue_full"
    assert guard.admit() == "queue_full"
    guard.record_shed("queue_full")
    guard.record_shed("memory_pressure")
    guard.record_shed("queue_full")
    assert guard.registry.counters.shed_total == 3
    assert guard.admission.shed_by_reason == {"queue_full": 2, "memory_pressure": 1}
    assert guard.status()["sessions"]["shed_total"] == 3


# -- status --------------------------------------------------------------------------------


async def test_status_has_stable_keys() -> None:
    fake = Fake(WARN)
    guard = make_guard(fake)
    guard.registry.open("http")
    guard.registry.open("websocket")
    status = guard.status()
    assert {"level", "memory", "sessions", "streams", "thresholds"} <= set(status)
    assert status["level"] == "warn"
    assert {"rss_bytes", "limit_bytes", "used_ratio", "source"} <= set(status["memory"])
    assert status["memory"]["used_ratio"] == pytest.approx(0.78)
    assert status["memory"]["source"] == "fake"
    assert isinstance(status["memory"]["rss_bytes"], int)
    assert {"active", "idle", "opened_total", "closed_total", "evicted_total",
            "shed_total"} <= set(status["sessions"])
    assert status["sessions"]["active"] == 1
    assert status["sessions"]["idle"] == 1
    assert status["sessions"]["opened_total"] == 2
    assert {"open", "completed_total", "aborted_total", "disconnected_total"} <= set(
        status["streams"]
    )
    assert {"warn", "evict", "shed"} <= set(status["thresholds"])
    assert status["thresholds"]["warn"] == 0.75
    assert status["thresholds"]["evict"] == 0.85
    assert status["thresholds"]["shed"] == 0.92
    assert "session_list" not in status
    listed = guard.status(include_sessions=True)["session_list"]
    assert len(listed) == 2


async def test_status_level_tracks_policy() -> None:
    fake = Fake(NORMAL)
    guard = make_guard(fake)
    for used, label in ((NORMAL, "normal"), (WARN, "warn"), (EVICT, "evict"), (SHED, "shed")):
        fake.used = used
        guard.sample_now()
        assert guard.status()["level"] == label


# -- snapshots and heap trim ---------------------------------------------------------------


async def test_snapshot_taken_when_level_first_reaches_warn() -> None:
    fake = Fake(NORMAL)
    guard = make_guard(fake)
    await guard.tick()
    assert guard.snapshots.total == 0
    fake.used = WARN
    await guard.tick()
    assert guard.snapshots.total == 1
    snap = guard.snapshots.recent()[-1]
    assert snap["level"] == "warn"
    assert snap["source"] == "fake"
    await guard.tick()  # still warn, ring not due yet: no second snapshot
    assert guard.snapshots.total == 1


async def test_snapshot_taken_when_jumping_past_warn() -> None:
    fake = Fake(NORMAL)
    guard = make_guard(fake)
    fake.used = SHED
    await guard.tick()
    assert guard.snapshots.total == 1
    assert guard.snapshots.recent()[-1]["level"] == "shed"


async def test_shrink_heap_runs_on_tick_after_eviction_burst() -> None:
    fake = Fake(EVICT)
    guard = make_guard(fake)
    victims = [idle(guard, 60_000) for _ in range(2)]
    await guard.tick()
    assert all(v.closed for v in victims)
    assert guard.heap.trims_total == 0  # not in the same tick
    fake.used = NORMAL
    await guard.tick()
    assert guard.heap.trims_total == 1
    await guard.tick()
    assert guard.heap.trims_total == 1  # once per burst


async def test_no_heap_trim_without_eviction() -> None:
    fake = Fake(NORMAL)
    guard = make_guard(fake)
    idle(guard, 60_000)
    for _ in range(3):
        await guard.tick()
    assert guard.heap.trims_total == 0


async def test_heap_trim_after_idle_timeout() -> None:
    guard = make_guard(Fake(NORMAL), idle_timeout=5)
    s = idle(guard)
    s.last_activity -= 10
    await guard.tick()
    assert s.closed
    await guard.tick()
    assert guard.heap.trims_total == 1


# -- evicted streams -----------------------------------------------------------------------


async def test_evicted_websocket_streams_close_and_count_aborted() -> None:
    guard = make_guard(Fake(SHED), max_evictions_per_tick=10)
    items = [await streaming(guard, 100_000, kind="websocket") for _ in range(3)]
    await guard.tick()  # need ~150_000: two 100_000 streams
    done = [await asyncio.wait_for(i.task, 5) for i in items[:2]]
    assert done == ["ended", "ended"]
    assert [i.finalized for i in items] == [[True], [True], []]
    assert [i.session.closed for i in items] == [True, True, False]
    status = guard.status()
    assert status["streams"]["aborted_total"] == 2
    assert status["streams"]["completed_total"] == 0
    assert status["streams"]["open"] == 1
    assert status["sessions"]["evicted_total"] == 2
    assert guard.registry.idle_count == 0  # an evicted websocket does not fall back to idle
    await cleanup(guard, items[2])


async def test_sampler_start_and_stop() -> None:
    fake = Fake(NORMAL)
    guard = make_guard(fake, sample_interval=0.01)
    reads = fake.reads
    guard.ensure_started()
    guard.ensure_started()  # idempotent on the same loop
    await until(lambda: fake.reads > reads)
    await guard.stop()
    after = fake.reads
    await asyncio.sleep(0.03)
    assert fake.reads == after


async def test_source_oserror_is_tolerated() -> None:
    class Broken:
        name = "broken"

        def read(self) -> Reading:
            raise OSError("gone")

    fake = Fake(EVICT)
    guard = make_guard(fake)
    guard.add_source(Broken())
    assert guard.sample_now() == pytest.approx(0.9)
    assert set(guard.readings) == {"fake"}
