"""Warn-level snapshots (actions/snapshots.py) taken by the tick."""

from __future__ import annotations

import pytest

from tests.support.guard import (
    NORMAL,
    SHED,
    WARN,
    fake_source,
    make_guard,
)

pytestmark = pytest.mark.anyio


async def test_snapshot_taken_when_level_first_reaches_warn() -> None:
    fake = fake_source(NORMAL)
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
    fake = fake_source(NORMAL)
    guard = make_guard(fake)
    fake.used = SHED
    await guard.tick()
    assert guard.snapshots.total == 1
    assert guard.snapshots.recent()[-1]["level"] == "shed"
