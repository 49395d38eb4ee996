"""``GET /llm-guard/snapshot``: snapshots, diffs, auth, caps and bad input (in process)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware
from llm_guard_sdk.cli import format_diff
from llm_guard_sdk.leaks import HeapSnapshots, enable_snapshots

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


def client(guard: Guard, ip: str = "127.0.0.1", **headers: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=GuardMiddleware(ok_app, guard=guard), client=(ip, 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers)


def guarded(**config: Any) -> tuple[Guard, HeapSnapshots]:
    guard = Guard(GuardConfig.defaults(sources=("process",), **config))
    return guard, enable_snapshots(guard, keep=3)


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


async def test_needs_the_status_auth() -> None:
    guard, _ = guarded(status_token=TOKEN)
    async with client(guard) as http:
        assert (await http.get("/llm-guard/snapshot")).status_code == 401
    async with client(guard, authorization="Bearer wrong-token-9") as http:
        assert (await http.get("/llm-guard/snapshot")).status_code == 401
    async with client(guard, authorization=f"Bearer {TOKEN}") as http:
        assert (await http.get("/llm-guard/snapshot")).status_code == 200
    open_guard, _ = guarded()
    async with client(open_guard, ip="10.1.2.3") as http:  # no token: loopback only
        assert (await http.get("/llm-guard/snapshot")).status_code == 403
    async with client(open_guard, ip="10.1.2.3") as http:
        assert (await http.get("/llm-guard/snapshot?diff=abc")).status_code == 403


async def test_not_served_unless_enabled() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    async with client(guard) as http:
        response = await http.get("/llm-guard/snapshot")
    assert response.status_code == 404
    assert "/snapshot" not in response.json()["endpoints"]
    assert enable_snapshots(guard) is enable_snapshots(guard)  # idempotent
