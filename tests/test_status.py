"""The status document (status.py) as the guard serves it."""

from __future__ import annotations

import pytest

from tests.support.guard import (
    EVICT,
    NORMAL,
    SHED,
    WARN,
    fake_source,
    make_guard,
)

pytestmark = pytest.mark.anyio


async def test_status_has_stable_keys() -> None:
    fake = fake_source(WARN)
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
    fake = fake_source(NORMAL)
    guard = make_guard(fake)
    for used, label in ((NORMAL, "normal"), (WARN, "warn"), (EVICT, "evict"), (SHED, "shed")):
        fake.used = used
        guard.sample_now()
        assert guard.status()["level"] == label


async def test_memory_names_the_limit_origin_and_each_source_health() -> None:
    from tests.support.sources import FakeSource
    from tests.support.sources import make_guard as guard_with_limit

    guard = guard_with_limit(FakeSource(300, 1000), memory_limit="64Mi")
    memory = guard.status()["memory"]
    assert (memory["limit_bytes"], memory["limit_source"]) == (64 * 2**20, "configured")
    assert memory["source"] == "fake"
    assert memory["sources"]["fake"] == {"used_bytes": 300, "limit_bytes": 1000,
                                         "pressure": 0.3, "stale": False, "errors_total": 0,
                                         "last_error": ""}
