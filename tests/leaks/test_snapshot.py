"""``GET /llm-guard/snapshot``: snapshots, diffs, auth, caps and bad input (in process)."""

from __future__ import annotations

import asyncio
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware
from llm_guard_sdk.cli import format_diff
from llm_guard_sdk.leaks import HeapSnapshots, LeakSettings, enable_snapshots

pytestmark = pytest.mark.anyio
TOKEN = "snapshot-token-1"


class Grower:
    pass


KEEP: list[Grower] = []


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    yield
    KEEP.clear()


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def client(guard: Guard, ip: str = "127.0.0.1", *, token: str | None = TOKEN,
           **headers: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=GuardMiddleware(ok_app, guard=guard), client=(ip, 1234))
    if token is not None:
        headers = {"authorization": f"Bearer {token}", **headers}
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers)


def guarded(min_interval: float = 0.0, **config: Any) -> tuple[Guard, HeapSnapshots]:
    guard = Guard(GuardConfig.defaults(sources=("process",), status_token=TOKEN, **config))
    return guard, enable_snapshots(guard, keep=3, min_interval=min_interval)


async def test_snapshot_then_diff_shows_growth() -> None:
    guard, _ = guarded()
    async with client(guard) as http:
        first = (await http.get("/llm-guard/snapshot")).json()
        assert first["id"] == 1 and first["objects"] > 0 and first["kept"] == [1]
        assert first["tracemalloc"] is False
        KEEP.extend(Grower() for _ in range(500))
        await http.get("/anything")  # one session opened and closed
        response = await http.get("/llm-guard/snapshot", params={"diff": "1", "limit": "5"})
    assert response.status_code == 200
    doc = response.json()
    assert (doc["id"], doc["base"]) == (2, 1)
    assert len(doc["types"]) <= 5
    grower = next(r for r in doc["types"] if r["type"] == f"{__name__}.Grower")
    assert grower["delta"] == 500 and grower["after"] - grower["before"] == 500
    assert doc["types"][0]["delta"] >= 500  # sorted by growth
    assert doc["sessions"]["delta"]["opened_total"] == 1
    assert doc["sessions"]["delta"]["open"] == 0
    assert set(doc["rss_bytes"]) == {"before", "after", "delta"}
    assert doc["tracemalloc"] is None and "PYTHONTRACEMALLOC" in doc["tracemalloc_note"]
    table = format_diff(doc)
    assert "snapshot 1 -> 2 after" in table
    assert f"{__name__}.Grower" in table and "+500" in table


async def test_tracemalloc_lines_when_tracing() -> None:
    guard, _ = guarded()
    tracemalloc.start()
    try:
        async with client(guard) as http:
            await http.get("/llm-guard/snapshot")
            KEEP.extend(Grower() for _ in range(2000))
            doc = (await http.get("/llm-guard/snapshot?diff=1")).json()
    finally:
        tracemalloc.stop()
    assert doc["tracemalloc"], doc.get("tracemalloc_note")
    assert any("test_snapshot.py" in row["where"] and row["size_delta_bytes"] > 0
               for row in doc["tracemalloc"])
    assert "test_snapshot.py" in format_diff(doc)


async def test_keeps_at_most_keep_snapshots() -> None:
    guard, snapshots = guarded()
    async with client(guard) as http:
        for _ in range(4):
            await http.get("/llm-guard/snapshot")
        assert snapshots.kept_ids == [2, 3, 4]
        response = await http.get("/llm-guard/snapshot?diff=1")
    assert response.status_code == 404
    assert response.json() == {"error": "snapshot 1 not found (kept: [2, 3, 4])",
                               "kept": [2, 3, 4]}


@pytest.mark.parametrize("query", ["diff=abc", "diff=0", "diff=-1", "diff=1.5", "diff=%20",
                                   "diff=1&diff=2", "diff=99999999999999999999999",
                                   "limit=0", "limit=501", "limit=x", "diff=1&limit=1e3"])
async def test_bad_input_is_400_json(query: str) -> None:
    guard, _ = guarded()
    async with client(guard) as http:
        await http.get("/llm-guard/snapshot")
        response = await http.get(f"/llm-guard/snapshot?{query}")
    assert response.status_code == 400
    assert "error" in response.json()


async def test_unknown_id_is_404() -> None:
    guard, _ = guarded()
    async with client(guard) as http:
        response = await http.get("/llm-guard/snapshot?diff=7")
    assert response.status_code == 404
    assert response.json()["kept"] == []


async def test_always_needs_the_token_even_from_loopback() -> None:
    guard, _ = guarded()
    async with client(guard, token=None) as http:
        missing = await http.get("/llm-guard/snapshot")
        assert (await http.get("/llm-guard/status")).status_code == 401
    assert missing.status_code == 401 and missing.headers["www-authenticate"]
    async with client(guard, token="wrong-token-9") as http:
        assert (await http.get("/llm-guard/snapshot")).status_code == 401
    async with client(guard) as http:
        assert (await http.get("/llm-guard/snapshot")).status_code == 200
    # Without a configured token the route is closed, even to loopback, even with bad input.
    open_guard = Guard(GuardConfig(sources=("process",)))
    snapshots = enable_snapshots(open_guard, min_interval=0)
    async with client(open_guard, token=None) as http:
        refused = await http.get("/llm-guard/snapshot")
        assert (await http.get("/llm-guard/snapshot?diff=abc")).status_code == 403
        assert (await http.get("/llm-guard/status")).status_code == 200  # loopback still ok
    assert refused.status_code == 403 and "LLM_GUARD_STATUS_TOKEN" in refused.json()["error"]
    assert snapshots.total == 0


async def test_one_at_a_time_429_while_busy() -> None:
    guard, snapshots = guarded()
    started, release = threading.Event(), threading.Event()
    take = snapshots.take

    def slow_take() -> Any:
        started.set()
        assert release.wait(30), "the test never released the snapshot"
        return take()

    snapshots.take = slow_take  # type: ignore[method-assign]
    async with client(guard) as http:
        first = asyncio.create_task(http.get("/llm-guard/snapshot"))
        assert await asyncio.to_thread(started.wait, 30)
        busy = await http.get("/llm-guard/snapshot")
        busy_diff = await http.get("/llm-guard/snapshot?diff=1")  # checked after the input
        release.set()
        done = await first
        after = await http.get("/llm-guard/snapshot")
    assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
    assert "being taken" in busy.json()["error"]
    assert busy_diff.status_code == 404  # snapshot 1 did not exist yet: input first
    assert done.status_code == 200 and after.status_code == 200
    assert snapshots.total == 2 and snapshots.refused_total == 1


async def test_minimum_interval_429_with_retry_after() -> None:
    guard, snapshots = guarded(min_interval=600)
    async with client(guard) as http:
        first = await http.get("/llm-guard/snapshot")
        again = await http.get("/llm-guard/snapshot")
        diff_again = await http.get("/llm-guard/snapshot?diff=1")
    assert first.status_code == 200
    for response in (again, diff_again):
        assert response.status_code == 429
        assert 590 <= int(response.headers["retry-after"]) <= 600
        assert "at most one snapshot per 600s" in response.json()["error"]
    assert snapshots.total == 1 and snapshots.refused_total == 2
    assert LeakSettings.defaults().snapshot_min_interval == 10.0
    assert HeapSnapshots(guard).min_interval == 10.0  # the setting is the default
    with pytest.raises(ValueError, match="min_interval"):
        HeapSnapshots(guard, min_interval=-1)


async def test_not_served_unless_enabled() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    async with client(guard) as http:
        response = await http.get("/llm-guard/snapshot")
    assert response.status_code == 404
    assert "/snapshot" not in response.json()["endpoints"]
    assert enable_snapshots(guard) is enable_snapshots(guard)  # idempotent


def test_min_interval_comes_from_the_leak_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_GUARD_SNAPSHOT_MIN_INTERVAL", "2.5")
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    assert HeapSnapshots(guard).min_interval == 2.5
