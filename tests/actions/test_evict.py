"""Eviction (actions/evict.py) through the guard: victim order, need, budget, idle timeouts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from llm_guard_sdk.policy import Level
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import guard_stream
from tests.support.guard import (
    EVICT,
    NORMAL,
    SHED,
    WARN,
    cleanup,
    fake_source,
    idle,
    make_guard,
    record_closes,
    streaming,
)

pytestmark = pytest.mark.anyio


# -- eviction order --------------------------------------------------------------------


async def test_eviction_order_idle_lru_then_largest_streams() -> None:
    fake = fake_source(EVICT)  # pressure 0.90 -> need ~100_000 bytes to reach 0.80
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
    guard = make_guard(fake_source(EVICT))
    youngs = [idle(guard, 100_000, old=False) for _ in range(3)]
    target = await streaming(guard, 10)
    log: list[Session] = []
    record_closes([*youngs, target.session], log)
    assert await guard.evict() == 1
    assert log == [target.session]
    assert not any(s.closed for s in youngs)
    await cleanup(guard, target)


async def test_min_session_age_zero_evicts_fresh_idle() -> None:
    guard = make_guard(fake_source(EVICT), min_session_age=0)
    fresh = idle(guard, 200_000, old=False)
    assert await guard.evict() == 1
    assert fresh.closed


async def test_eviction_stops_once_need_is_covered_by_idle() -> None:
    guard = make_guard(fake_source(EVICT))  # need ~100_000
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
    guard = make_guard(fake_source(EVICT))  # need ~100_000
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
    guard = make_guard(fake_source(SHED))
    sessions = [idle(guard, 60_000) for _ in range(5)]
    assert await guard.evict() == 3
    assert [s.closed for s in sessions] == [True, True, True, False, False]


async def test_evict_below_target_or_without_limit_does_nothing() -> None:
    fake = fake_source(NORMAL)
    guard = make_guard(fake)
    s = idle(guard, 1_000_000)
    assert await guard.evict() == 0
    fake.used, fake.limit = 10**12, None
    guard.sample_now()
    assert await guard.evict() == 0
    assert not s.closed


async def test_eviction_uses_held_bytes_not_traffic() -> None:
    """A stream that sent 7 MiB but holds nothing is not what eviction frees first."""
    guard = make_guard(fake_source(EVICT))  # need ~100_000 bytes to reach 0.80
    chatty = guard.registry.open("http")
    chatty.created_at -= 1000
    gate = asyncio.Event()

    async def talk() -> AsyncIterator[bytes]:
        for _ in range(7):
            yield b"x" * 2**20
        await gate.wait()
        yield b"never"

    sent = guard_stream(talk(), session=chatty)
    for _ in range(7):
        await anext(sent)
    holder = await streaming(guard, 0)
    holder.stream.declare_held(150_000)  # e.g. a buffer the app keeps for this stream
    assert (chatty.bytes_sent, sent.bytes_out, chatty.held_bytes) == (0, 7 * 2**20, 0)
    assert holder.session.held_bytes == 150_000

    assert await guard.evict() == 1
    assert holder.session.close_reason is CloseReason.EVICTED
    assert not chatty.closed
    assert guard.evictor.expected_free_bytes == 150_000
    await sent.aclose()
    await cleanup(guard, holder)


# -- idle timeout ----------------------------------------------------------------------


async def test_idle_timeout_level_normal_closes_idle_sessions_at_any_level() -> None:
    guard = make_guard(fake_source(NORMAL), idle_timeout=60, idle_timeout_level="normal")
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
    guard = make_guard(fake_source(WARN), idle_timeout=10, min_session_age=1000)
    s = idle(guard, old=False)
    s.last_activity -= 20
    await guard.tick()
    assert s.close_reason is CloseReason.IDLE_TIMEOUT


async def test_idle_websocket_stays_open_at_normal_level_by_default() -> None:
    """A chat tab left open at normal load stays open; from warn up it is closed."""
    fake = fake_source(NORMAL)
    guard = make_guard(fake, idle_timeout=60)
    assert guard.config.idle_timeout_level == "warn"
    tab = idle(guard)
    tab.last_activity -= 10_000
    for _ in range(3):
        await guard.tick()
    assert guard.policy.level is Level.NORMAL
    assert not tab.closed
    assert guard.registry.counters.evicted_total == 0
    fake.used = WARN
    await guard.tick()
    assert guard.policy.level is Level.WARN
    assert tab.close_reason is CloseReason.IDLE_TIMEOUT


@pytest.mark.parametrize(("setting", "closes_at"), [("evict", Level.EVICT), ("shed", Level.SHED)])
async def test_idle_timeout_level_setting(setting: str, closes_at: Level) -> None:
    fake = fake_source(NORMAL)
    guard = make_guard(fake, idle_timeout=60, idle_timeout_level=setting, min_session_age=10**6)
    tab = idle(guard, old=False)  # too young to be evicted: only the idle timeout closes it
    tab.last_activity -= 10_000
    for used in (NORMAL, WARN, EVICT, SHED):
        fake.used = used
        await guard.tick()
        assert tab.closed is (guard.policy.level >= closes_at)
        if tab.closed:
            assert tab.close_reason is CloseReason.IDLE_TIMEOUT
            break


# -- evicted streams -------------------------------------------------------------------


async def test_evicted_websocket_streams_close_and_count_aborted() -> None:
    guard = make_guard(fake_source(SHED), max_evictions_per_tick=10)
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


# -- priority classes ------------------------------------------------------------------


async def test_eviction_takes_low_idle_then_low_streams_before_higher_classes() -> None:
    fake = fake_source(EVICT)  # pressure 0.90 -> need ~100_000 bytes to reach 0.80
    guard = make_guard(fake, max_evictions_per_tick=50)
    # The high and normal sessions are older (LRU first) and larger: without classes they
    # would go first.
    high_idle = idle(guard, 60_000, tenant="gold", priority=Priority.HIGH)
    high_stream = await streaming(guard, 400_000, tenant="gold", priority=Priority.HIGH)
    normal_idle = idle(guard, 40_000)
    low_idle = idle(guard, 20_000, tenant="free", priority=Priority.LOW)
    low_stream = await streaming(guard, 30_000, tenant="free", priority=Priority.LOW)
    log: list[Session] = []
    record_closes([high_idle, high_stream.session, normal_idle, low_idle, low_stream.session],
                  log)

    await guard.evict()

    # low idle (20k), low stream (30k): 50k < 100k, so the normal idle one (40k) and then the
    # high idle one (60k) follow; the high stream stays.
    assert log == [low_idle, low_stream.session, normal_idle, high_idle]
    assert not high_stream.session.closed
    assert guard.registry.tenants.figures("free") is None  # both gone: the entry went too
    gold = guard.registry.tenants.figures("gold")
    assert gold is not None and gold.sessions == 1
    await cleanup(guard, low_stream, high_stream)


async def test_low_class_alone_covers_the_need_and_spares_the_rest() -> None:
    fake = fake_source(EVICT)
    guard = make_guard(fake)
    high = [idle(guard, 200_000, priority=Priority.HIGH) for _ in range(2)]
    low = [idle(guard, 60_000, priority=Priority.LOW) for _ in range(2)]
    log: list[Session] = []
    record_closes([*high, *low], log)
    await guard.evict()
    assert log == low
    assert not any(s.closed for s in high)
