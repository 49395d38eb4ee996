"""The feed in process: one snapshot per interval shared by every page, built only while one
listens; the snapshot's content and its cost bound (the top sessions of 10,000)."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest

from llm_guard_sdk import Guard
from llm_guard_sdk.dashboard import Dashboard, MemoryHistory, SnapshotFeed, id_prefix, make_point
from llm_guard_sdk.monitors.base import Reading
from tests.support import FakeSource, make_guard, sse_events

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def events(chunks: list[bytes]) -> list[tuple[str, Any]]:
    return [(name, json.loads(data) if data else None)
            for name, data in sse_events(b"".join(chunks).decode(), comments=False)]


def dashboard_of(guard: Guard) -> Dashboard:
    dashboard = guard.extension("dashboard")
    assert isinstance(dashboard, Dashboard)
    return dashboard


# -- SnapshotFeed ------------------------------------------------------------------------------


async def test_nothing_is_built_while_nobody_listens() -> None:
    clock = Clock()
    feed = SnapshotFeed(interval=1.0, clock=clock)
    assert not feed.due()
    subscription = feed.subscribe([])
    assert feed.listeners == 1 and feed.due()
    feed.publish({"n": 1})
    assert not feed.due()  # once per interval, however often the guard ticks
    clock.now += 1.0
    assert feed.due()
    await subscription.aclose()
    assert feed.listeners == 0 and not feed.due()
    assert feed.latest == b""  # the last page left: a stale snapshot is not kept


async def test_every_subscription_gets_the_same_bytes_and_a_slow_one_skips() -> None:
    clock = Clock()
    feed = SnapshotFeed(interval=1.0, clock=clock)
    fast, slow = feed.subscribe([b"event: history\ndata: {}\n\n"]), feed.subscribe([])
    assert await anext(fast) == b"retry: 1000\n\n"
    assert await anext(fast) == b"event: history\ndata: {}\n\n"
    assert await anext(slow) == b"retry: 1000\n\n"
    waiting = asyncio.ensure_future(anext(fast))
    await asyncio.sleep(0)
    feed.publish({"n": 1})
    first = await asyncio.wait_for(waiting, 30)
    assert events([first]) == [("snapshot", {"n": 1})]
    for n in (2, 3):
        clock.now += 1
        feed.publish({"n": n})
    # The slow page missed two snapshots: it gets the newest only, nothing queued.
    assert await anext(slow) == feed.latest == await anext(fast)
    assert events([feed.latest]) == [("snapshot", {"n": 3})]
    assert feed.built_total == 3
    for subscription in (fast, slow):
        await subscription.aclose()


async def test_a_quiet_feed_sends_pings_and_a_closed_one_ends() -> None:
    feed = SnapshotFeed(keepalive=0.01)
    subscription = feed.subscribe([])
    await anext(subscription)  # retry
    assert events([await anext(subscription)]) == [("ping", {})]
    await subscription.aclose()
    await subscription.aclose()  # once only
    assert feed.listeners == 0
    with pytest.raises(StopAsyncIteration):
        await anext(subscription)


async def test_a_subscription_closed_before_it_started_releases_its_slot() -> None:
    feed = SnapshotFeed(max_listeners=2)
    first, second = feed.subscribe([]), feed.subscribe([])
    assert feed.full
    with pytest.raises(RuntimeError, match="at most 2 pages"):
        feed.subscribe([])
    await first.aclose()
    await second.aclose()
    assert feed.listeners == 0 and not feed.full


async def test_a_new_page_gets_the_current_snapshot_at_once() -> None:
    feed = SnapshotFeed()
    keep = feed.subscribe([])
    feed.publish({"n": 1})
    late = feed.subscribe([])
    assert [await anext(late), await anext(late)] == [b"retry: 1000\n\n", feed.latest]
    for subscription in (keep, late):
        await subscription.aclose()


async def test_a_subscription_ends_after_max_age() -> None:
    clock = Clock()
    feed = SnapshotFeed(max_age=20.0, keepalive=0.01, clock=clock)
    subscription = feed.subscribe([])
    await anext(subscription)  # retry
    clock.now += 19.0
    assert events([await anext(subscription)]) == [("ping", {})]  # still open
    clock.now += 1.0
    with pytest.raises(StopAsyncIteration):
        await anext(subscription)
    assert feed.listeners == 0  # ending by itself released the slot


@pytest.mark.parametrize("kwargs", [{"interval": 0}, {"keepalive": -1}, {"max_listeners": 0},
                                    {"max_age": 0}])
def test_bad_feed_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        SnapshotFeed(**kwargs)  # type: ignore[arg-type]


# -- history -----------------------------------------------------------------------------------


def test_history_keeps_one_point_per_interval_up_to_its_size() -> None:
    history = MemoryHistory(size=3, interval=1.0)
    readings = {"fake": Reading("fake", 500, 1000), "host": Reading("host", 7, None)}
    for t in (0.0, 0.5, 1.0, 2.0, 3.0, 3.9, 4.0):
        if history.due(t):
            history.record(make_point(t, "normal", readings))
    assert [p["t"] for p in history.points()] == [2.0, 3.0, 4.0]
    assert history.latest == {"t": 4.0, "level": "normal", "p": {"fake": 0.5},
                              "u": {"fake": 500, "host": 7}}  # no limit: no pressure


async def test_the_tick_records_history_without_listeners_and_no_snapshot() -> None:
    source = FakeSource(used=400)
    guard = make_guard(source)
    dashboard = dashboard_of(guard)
    await guard.tick()
    assert len(dashboard.history) == 1 and dashboard.feed.built_total == 0
    point = dashboard.history.latest
    assert point is not None and point["p"]["fake"] == 0.4 and point["u"]["fake"] == 400


async def test_one_snapshot_per_interval_for_any_number_of_pages() -> None:
    guard = make_guard(FakeSource(used=900), dashboard=False)
    dashboard = Dashboard(interval=3600)  # two ticks always fall in one interval
    guard.add_extension(dashboard)
    pages = [dashboard.feed.subscribe([]) for _ in range(5)]
    await guard.tick()
    await guard.tick()  # within the same interval: nothing new
    assert dashboard.feed.built_total == 1
    snapshot = json.loads(dashboard.feed.latest.split(b"data: ", 1)[1])
    assert snapshot["level"] == "evict" and snapshot["point"]["p"]["fake"] == 0.9
    assert snapshot["pid"] == os.getpid()
    for page in pages:
        await page.aclose()


async def test_a_failing_snapshot_is_an_internal_error_not_a_broken_tick(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    guard = make_guard()
    dashboard = dashboard_of(guard)
    page = dashboard.feed.subscribe([])

    def broken() -> dict[str, Any]:
        raise RuntimeError("snapshot bug")

    monkeypatch.setattr(dashboard, "snapshot", broken)
    await guard.tick()
    assert guard.internal_errors_total == 1
    assert "dashboard tick" in caplog.text
    await page.aclose()


# -- the snapshot ------------------------------------------------------------------------------


def test_ten_thousand_sessions_give_the_top_rows_and_the_totals() -> None:
    guard = make_guard(max_sessions=20_000)
    sessions = [guard.registry.open("http", "/v1/chat") for _ in range(10_000)]
    for n, session in enumerate(sessions):
        session.attached_bytes = (n * 7919) % 10_007  # distinct-ish sizes, in no order
    dashboard = dashboard_of(guard)
    doc = dashboard.snapshot()
    table = doc["sessions"]
    assert table["total"] == 10_000 and table["top"] == 50 and len(table["rows"]) == 50
    held = [row["held"] for row in table["rows"]]
    assert held == sorted((s.attached_bytes for s in sessions), reverse=True)[:50]
    assert table["held_bytes"] == sum(s.attached_bytes for s in sessions)
    text = json.dumps(doc)
    assert all(s.id not in text for s in sessions)  # prefixes only
    assert "/v1/chat" not in text  # no paths either


def test_a_row_says_sizes_times_state_and_tenant_never_the_full_id() -> None:
    guard = make_guard()
    session = guard.registry.open("websocket", "/ws/chat/secret-topic",
                                  label="<script>alert(1)</script>", tenant="<b>acme</b>")
    session.attached_bytes = 4096
    row = dashboard_of(guard).snapshot()["sessions"]["rows"][0]
    assert row["id"] == id_prefix(session.id)
    assert row["id"].startswith("sess-") and row["id"].endswith("…")
    assert len(row["id"]) == len("sess-") + 8 + 1 < len(session.id)
    assert row["request_id"] == "<script>alert(1)</script>"  # data; the page shows it as text
    assert row["tenant"] == "<b>acme</b>"
    assert row["state"] == "idle" and row["kind"] == "websocket"
    assert row["held"] == 4096 and row["kv"] == 0
    assert row["age"] >= 0 and row["idle"] >= 0


def test_counters_follow_the_guard() -> None:
    guard = make_guard(leaks=False)
    doc = dashboard_of(guard).snapshot()
    assert doc["counters"]["leaks"] is None  # the leaks extension is off: the page says so
    guard.record_shed("memory")
    c = guard.registry.counters
    c.evicted_total, c.streams_aborted_total = 3, 2
    counters = dashboard_of(guard).snapshot()["counters"]
    assert (counters["evictions"], counters["aborts"], counters["sheds"]) == (3, 2, 1)
    assert counters["sheds_by_reason"] == {"memory": 1}


def test_leaks_are_counted_when_the_extension_runs() -> None:
    guard = make_guard(leaks=True)
    assert dashboard_of(guard).snapshot()["counters"]["leaks"] == 0


@pytest.mark.parametrize(("session_id", "shown"), [
    ("sess-abcdefghijklmnop", "sess-abcdefgh…"), ("abcdefghijklmnop", "abcdefgh…"),
    ("ws-1234", "ws-1234…")])
def test_id_prefix_keeps_the_kind_and_eight_characters(session_id: str, shown: str) -> None:
    assert id_prefix(session_id) == shown
