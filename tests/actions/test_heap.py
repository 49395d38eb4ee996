"""Heap trimming (actions/heap.py) after eviction bursts."""

from __future__ import annotations

import pytest

from tests.support.guard import (
    EVICT,
    NORMAL,
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
