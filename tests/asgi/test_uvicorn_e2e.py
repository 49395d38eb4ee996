"""End to end: the demo app under a real uvicorn subprocess, with real httpx/websockets clients."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import httpx
import pytest
import websockets

from tests.support import BASE_ENV, read_sse, status, uvicorn_server, wait_for, wait_for_level

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with uvicorn_server("tests.support.apps.e2e_app:app", BASE_ENV) as base:
        yield base


async def test_fifty_streams_half_dropped_every_generator_closed(server: str) -> None:
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=200)) as admin:
        before = await status(admin, server)
        stats_before = (await admin.get(f"{server}/test/stats")).json()

        async def one(i: int) -> list[tuple[str, str]]:
            async with httpx.AsyncClient(timeout=30) as client:
                url = f"{server}/chat?prompt=p{i}&max_tokens=40"
                return await read_sse(client, url, drop_after=3 if i % 2 else None)

        results = await asyncio.gather(*(one(i) for i in range(50)))
        completed = [r for i, r in enumerate(results) if i % 2 == 0]
        assert all(r[-1][0] == "done" and len(r) == 41 for r in completed)

        async def all_closed() -> bool:
            doc = await status(admin, server)
            return doc["sessions"]["active"] == 0 and doc["streams"]["open"] == 0

        elapsed = await wait_for(all_closed, timeout=1.0)
        after = await status(admin, server)
        stats = (await admin.get(f"{server}/test/stats")).json()

    assert elapsed <= 1.0
    assert stats["started"] - stats_before["started"] == 50
    assert stats["closed"] - stats_before["closed"] == 50, "a dropped generator was not closed"
    assert stats["finished"] - stats_before["finished"] == 25
    assert stats["open"] == 0
    delta = {k: after["streams"][k] - before["streams"][k]
             for k in ("completed_total", "disconnected_total", "aborted_total")}
    assert delta == {"completed_total": 25, "disconnected_total": 25, "aborted_total": 0}


async def test_dropped_client_frees_session_quickly(server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as admin:
        async with httpx.AsyncClient(timeout=30) as client:
            await read_sse(client, f"{server}/chat?prompt=slow&max_tokens=4000", drop_after=2)
        dropped_at = time.monotonic()

        async def freed() -> bool:
            doc = await status(admin, server)
            return doc["sessions"]["active"] == 0 and doc["streams"]["open"] == 0

        await wait_for(freed, timeout=1.0)
        assert time.monotonic() - dropped_at < 1.0
        assert (await admin.get(f"{server}/test/stats")).json()["open"] == 0


async def test_websocket_multi_turn_chat_and_disconnect(server: str) -> None:
    ws_url = server.replace("http://", "ws://") + "/ws/chat"
    async with websockets.connect(ws_url) as ws:
        for turn in (1, 2):
            await ws.send(json.dumps({"prompt": f"turn {turn}", "max_tokens": 5}))
            frames = [json.loads(await ws.recv()) for _ in range(6)]
            assert [f["type"] for f in frames] == ["token"] * 5 + ["done"]
            assert frames[-1]["turns"] == turn  # history attached to the session survives
        await ws.send("not json")
        assert json.loads(await ws.recv())["type"] == "error"
        async with httpx.AsyncClient() as admin:
            doc = await status(admin, server)
            assert doc["sessions"]["idle"] == 1
        await ws.send(json.dumps({"prompt": "long", "max_tokens": 4000}))
        await ws.recv()
    # client closed mid-stream
    async with httpx.AsyncClient() as admin:
        async def gone() -> bool:
            doc = await status(admin, server)
            return doc["sessions"]["active"] + doc["sessions"]["idle"] == 0
        await wait_for(gone, timeout=2.0)
        assert (await admin.get(f"{server}/test/stats")).json()["open"] == 0


async def test_pressure_sheds_evicts_and_recovers() -> None:
    env = {**BASE_ENV, "LLM_GUARD_MEMORY_LIMIT": "400MiB", "LLM_GUARD_MIN_SESSION_AGE": "0",
           "LLM_GUARD_RETRY_AFTER": "3"}
    with uvicorn_server("tests.support.apps.e2e_app:app", env) as base:
        async with httpx.AsyncClient(timeout=30) as admin:
            assert (await status(admin, base))["level"] == "normal"
            async def long_stream(i: int) -> list[tuple[str, str]]:
                async with httpx.AsyncClient(timeout=60) as client:
                    return await read_sse(client, f"{base}/chat?prompt=s{i}&max_tokens=4000")

            streams = [asyncio.create_task(long_stream(i)) for i in range(4)]

            async def streaming() -> bool:
                return bool((await status(admin, base))["streams"]["open"] == 4)

            await wait_for(streaming, timeout=5)
            # Push real RSS past the limit: the limit is now below current RSS.
            response = await admin.post(f"{base}/test/ballast", params={"mib": 420})
            assert response.status_code == 200

            await wait_for_level(admin, base, "shed", timeout=5)
            refused = await admin.get(f"{base}/chat", params={"prompt": "new"})
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "3"
            assert refused.json()["reason"] == "memory_pressure"
            results = await asyncio.wait_for(asyncio.gather(*streams), timeout=10)
            for events in results:  # every running stream was evicted, and told so
                assert ("evicted", '{"reason":"evicted"}') in events
                assert events[-1][0] == "done"
            doc = await status(admin, base)
            assert doc["sessions"]["evicted_total"] >= 4
            assert doc["streams"]["aborted_total"] >= 4
            assert doc["sessions"]["shed_total"] >= 1

            await admin.delete(f"{base}/test/ballast")  # pressure gone

            await wait_for_level(admin, base, "normal", timeout=10)
            events = await read_sse(admin, f"{base}/chat?prompt=back&max_tokens=3")
            assert events[-1][0] == "done" and len(events) == 4
            final = await status(admin, base)
            assert final["actions"]["heap_trims_total"] >= 1
            stats = (await admin.get(f"{base}/test/stats")).json()
            assert stats["open"] == 0 and stats["closed"] == stats["started"] == 5
