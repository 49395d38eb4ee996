"""The status document (status.py) as the guard serves it."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
                                         "pressure": 0.3, "advisory": False, "stale": False,
                                         "errors_total": 0, "last_error": ""}


async def test_status_shows_held_bytes_and_traffic_per_session_and_in_total() -> None:
    from llm_guard_sdk.session import CloseReason
    from llm_guard_sdk.stream import guard_stream

    async def nothing() -> AsyncIterator[bytes]:
        yield b""

    guard = make_guard(fake_source(NORMAL))
    a, b = guard.registry.open("http"), guard.registry.open("websocket")
    a.bytes_in, a.bytes_out = 100, 7000
    b.bytes_in, b.bytes_out = 10, 20
    a.attached_bytes, a.buffered_bytes = 1000, 64
    stream = guard_stream(nothing(), session=b)
    stream.set_backend_bytes(4096)
    stream.declare_held(8)
    doc = guard.status(include_sessions=True)
    assert doc["held"] == {"total_bytes": 1000 + 64 + 4096 + 8, "attached_bytes": 1000,
                           "buffered_bytes": 64, "backend_bytes": 4096, "declared_bytes": 8,
                           "estimated_sessions": 0}
    assert doc["traffic"] == {"bytes_sent_total": 7020, "bytes_received_total": 110}
    entry = {s["id"]: s for s in doc["session_list"]}[a.id]
    assert (entry["held_bytes"], entry["accounted_bytes"]) == (1064, 1064)
    assert (entry["bytes_sent"], entry["bytes_out"]) == (7000, 7000)
    assert (entry["bytes_received"], entry["bytes_in"]) == (100, 100)
    assert entry["estimated"] is False

    await guard.close_session(a, CloseReason.COMPLETED)
    await guard.close_session(b, CloseReason.COMPLETED)
    doc = guard.status()
    assert doc["held"]["total_bytes"] == 0  # closed sessions hold nothing ...
    assert doc["traffic"] == {"bytes_sent_total": 7020, "bytes_received_total": 110}  # ... moved
