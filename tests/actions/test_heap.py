"""Heap trimming (actions/heap.py) after eviction bursts."""

from __future__ import annotations

import pytest

from llm_guard_sdk.session import CloseReason
from tests.support.guard import (
    EVICT,
    NORMAL,
    WARN,
    fake_source,
    idle,
    make_guard,
)

pytestmark = pytest.mark.anyio


async def test_shrink_heap_runs_on_tick_after_eviction_burst() -> None:
    fake = fake_source(EVICT)
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
    fake = fake_source(NORMAL)
    guard = make_guard(fake)
    idle(guard, 60_000)
    for _ in range(3):
        await guard.tick()
    assert guard.heap.trims_total == 0


async def test_heap_trim_after_idle_timeout() -> None:
    guard = make_guard(fake_source(NORMAL), idle_timeout=5, idle_timeout_level="normal")
    s = idle(guard)
    s.last_activity -= 10
    await guard.tick()
    assert s.closed
    await guard.tick()
    assert guard.heap.trims_total == 1


async def test_sessions_that_end_under_pressure_get_their_memory_trimmed() -> None:
    # What a completed conversation frees stays in glibc's arenas without a trim: the guard
    # would keep judging (and evicting) on memory nobody holds any more.
    guard = make_guard(fake_source(WARN))
    guard.heap.min_interval = 3600.0
    await guard.close_session(idle(guard, 60_000), CloseReason.COMPLETED)
    await guard.tick()
    assert guard.heap.trims_total == 1
    await guard.close_session(idle(guard, 60_000), CloseReason.COMPLETED)
    await guard.tick()
    assert guard.heap.trims_total == 1  # at most once per min_interval
    guard.heap.min_interval = 0.0
    await guard.tick()
    assert guard.heap.trims_total == 2  # the second close is trimmed once the interval passed
    await guard.tick()
    assert guard.heap.trims_total == 2  # nothing closed since


async def test_no_trim_for_sessions_ending_at_normal_or_holding_nothing() -> None:
    guard = make_guard(fake_source(NORMAL))
    guard.heap.min_interval = 0.0
    await guard.close_session(idle(guard, 60_000), CloseReason.COMPLETED)
    await guard.tick()
    assert guard.heap.trims_total == 0
    pressured = make_guard(fake_source(WARN))
    pressured.heap.min_interval = 0.0
    await pressured.close_session(idle(pressured, 0), CloseReason.DISCONNECTED)
    await pressured.tick()
    assert pressured.heap.trims_total == 0


async def test_a_trim_for_ended_sessions_does_not_hold_back_eviction() -> None:
    guard = make_guard(fake_source(EVICT))
    guard.heap.min_interval = 0.0
    victim = idle(guard, 200_000)
    await guard.close_session(idle(guard, 60_000), CloseReason.COMPLETED)
    await guard.tick()
    assert guard.heap.trims_total == 1
    assert victim.closed  # evicted in the same tick as the trim


async def test_trims_collect_fully_once_per_interval_and_young_generations_between() -> None:
    """A full collection stops the event loop (the GIL): at most one per interval."""
    import time

    from llm_guard_sdk.actions.heap import HeapTrimmer
    from llm_guard_sdk.monitors import ProcessRSSSource

    heap = HeapTrimmer(ProcessRSSSource(None), trim=False, full_collect_interval=3600.0)
    assert heap.generation(time.monotonic()) == 2  # the first trim is a full one
    await heap.shrink()
    now = time.monotonic()
    assert heap.generation(now) == 1  # within the interval: young generations only
    assert heap.generation(now + 3600.0) == 2
    every = HeapTrimmer(ProcessRSSSource(None), trim=False, full_collect_interval=0.0)
    await every.shrink()
    assert every.generation(time.monotonic()) == 2


async def test_shrink_counts_full_collections() -> None:
    from llm_guard_sdk.actions.heap import HeapTrimmer
    from llm_guard_sdk.monitors import ProcessRSSSource

    heap = HeapTrimmer(ProcessRSSSource(None), trim=True, full_collect_interval=3600.0)
    for _ in range(3):
        await heap.shrink()
    assert heap.trims_total == 3
    assert heap.full_collections_total == 1  # the first; the others young ones
