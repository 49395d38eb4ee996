"""The demo app with a real vLLM engine under uvicorn, driven by real clients."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.support import VLLM_ENV, read_sse, status, uvicorn_server, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server(tiny_model: Any) -> Iterator[str]:
    env = {**VLLM_ENV, "LLM_GUARD_MEMORY_LIMIT": "6GiB", "LLM_GUARD_MIN_SESSION_AGE": "0"}
    with uvicorn_server("tests.support.apps.e2e_app:app", env, timeout=180) as base:
        yield base


async def drained(client: httpx.AsyncClient, base: str) -> bool:
    doc = await status(client, base)
    return bool(doc["vllm"]["unfinished"] == 0 and doc["streams"]["open"] == 0)


async def test_dropped_client_aborts_vllm_request_quickly(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as admin:
        await wait_for(lambda: drained(admin, server), timeout=10)
        before = (await status(admin, server))["vllm"]["aborted_total"]
        async with httpx.AsyncClient(timeout=60) as client:
            await read_sse(client, f"{server}/chat?prompt=drop&max_tokens=4000", drop_after=2)
        elapsed = await wait_for(lambda: drained(admin, server), timeout=2, interval=0.01)
        doc = await status(admin, server)
    assert elapsed < 0.2, f"request still generating {elapsed:.3f}s after the client left"
    assert doc["vllm"]["aborted_total"] == before + 1
    assert doc["streams"]["disconnected_total"] >= 1


async def test_twenty_streams_thirty_percent_dropped(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as admin:
        await wait_for(lambda: drained(admin, server), timeout=10)
        before = (await status(admin, server))["vllm"]

        async def one(i: int) -> list[tuple[str, str]]:
            drop = i % 10 in (1, 4, 7)  # 6 of 20
            async with httpx.AsyncClient(timeout=120) as client:
                url = f"{server}/chat?prompt=client{i}&max_tokens={4000 if drop else 60}"
                return await read_sse(client, url, drop_after=3 if drop else None)

        results = await asyncio.gather(*(one(i) for i in range(20)))
        await wait_for(lambda: drained(admin, server), timeout=5)
        after = (await status(admin, server))["vllm"]
    finished = [r for i, r in enumerate(results) if i % 10 not in (1, 4, 7)]
    assert len(finished) == 14 and all(r[-1][0] == "done" for r in finished)
    assert after["unfinished"] == 0
    assert after["aborted_total"] - before["aborted_total"] == 6
    assert after["completed_total"] - before["completed_total"] == 14


async def test_websocket_chat_with_vllm_and_disconnect(server: str) -> None:
    ws_url = server.replace("http://", "ws://") + "/ws/chat"
    async with websockets.connect(ws_url) as ws:
        await ws.send(json.dumps({"prompt": "hi", "max_tokens": 8}))
        frames = []
        while True:
            frame = json.loads(await ws.recv())
            frames.append(frame)
            if frame["type"] in ("done", "error"):
                break
        assert frames[-1] == {"type": "done", "turns": 1}
        await ws.send(json.dumps({"prompt": "long", "max_tokens": 4000}))
        await ws.recv()
    async with httpx.AsyncClient() as admin:
        await wait_for(lambda: drained(admin, server), timeout=2)


async def test_eviction_of_streaming_session_aborts_its_request(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as admin:
        await wait_for(lambda: drained(admin, server), timeout=10)
        before = await status(admin, server)

        async def long_stream() -> list[tuple[str, str]]:
            async with httpx.AsyncClient(timeout=60) as client:
                return await read_sse(client, f"{server}/chat?prompt=evictme&max_tokens=4000")

        task = asyncio.create_task(long_stream())

        async def streaming() -> bool:
            return bool((await status(admin, server))["vllm"]["unfinished"] == 1)

        await wait_for(streaming, timeout=10)
        rss = (await status(admin, server))["memory"]["rss_bytes"]
        ballast_mib = max(64, (6 * 2**30 - rss) // 2**20 + 200)
        await admin.post(f"{server}/test/ballast", params={"mib": ballast_mib})
        try:
            events = await asyncio.wait_for(task, timeout=10)
            doc = await status(admin, server)
        finally:
            await admin.delete(f"{server}/test/ballast")
        assert ("evicted", '{"reason":"evicted"}') in events
        assert doc["vllm"]["unfinished"] == 0
        assert doc["vllm"]["aborted_total"] == before["vllm"]["aborted_total"] + 1
        assert doc["sessions"]["evicted_total"] == before["sessions"]["evicted_total"] + 1

        async def normal() -> bool:
            return bool((await status(admin, server))["level"] == "normal")

        await wait_for(normal, timeout=10)


async def test_bad_requests_get_clear_errors(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        too_long = await client.get(f"{server}/chat", params={"prompt": "word " * 700})
        bad_tokens = await client.get(f"{server}/chat", params={"prompt": "x", "max_tokens": "-3"})
        doc = await status(client, server)
    assert too_long.status_code == 400
    assert "maximum context length" in too_long.json()["error"]
    assert bad_tokens.status_code == 400
    assert doc["vllm"]["unfinished"] == 0
    assert doc["sessions"]["active"] == 0


@pytest.fixture(scope="module")
def kv_server(tiny_model: Any) -> Iterator[str]:
    """A tiny KV cache (8 blocks of 128 tokens) so a few long requests fill it."""
    env = {**VLLM_ENV, "LLM_GUARD_DEMO_KV_CACHE_BYTES": "2MiB",
           "LLM_GUARD_DEMO_MAX_MODEL_LEN": "512", "LLM_GUARD_RETRY_AFTER": "2"}
    with uvicorn_server("tests.support.apps.e2e_app:app", env, timeout=180) as base:
        yield base


async def test_kv_pressure_sheds_then_resumes(kv_server: str) -> None:
    base = kv_server
    async with httpx.AsyncClient(timeout=120) as admin:
        async def one(i: int) -> list[tuple[str, str]]:
            async with httpx.AsyncClient(timeout=120) as client:
                return await read_sse(client, f"{base}/chat?prompt=kv{i}&max_tokens=480")

        tasks = [asyncio.create_task(one(i)) for i in range(6)]
        seen_shed: dict[str, Any] = {}

        async def shedding() -> bool:
            doc = await status(admin, base)
            if doc["level"] == "shed":
                seen_shed.update(doc)
                return True
            return False

        await wait_for(shedding, timeout=30, interval=0.02)
        refused = await admin.get(f"{base}/chat", params={"prompt": "new", "max_tokens": "4"})
        results = await asyncio.gather(*tasks)

        async def normal() -> bool:
            return bool((await status(admin, base))["level"] == "normal")

        await wait_for(normal, timeout=10)
        resumed = await read_sse(admin, f"{base}/chat?prompt=again&max_tokens=4")
    assert seen_shed["memory"]["source"] == "vllm_kv"
    assert seen_shed["memory"]["sources"]["vllm_kv"]["pressure"] >= 0.92
    assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
    assert refused.json()["reason"] == "memory_pressure"
    assert all(r[-1][0] == "done" for r in results)  # KV pressure sheds, it does not evict
    assert resumed[-1][0] == "done"


async def test_dead_engine_gives_clear_errors(kv_server: str) -> None:
    """Runs last in this module: it kills the engine of kv_server."""
    base = kv_server
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("GET", f"{base}/chat?prompt=dying&max_tokens=480") as response:
            assert response.status_code == 200
            lines = response.aiter_lines()
            assert (await anext(lines)).startswith("data:")
            killed = (await client.post(f"{base}/test/kill-engine")).json()["killed"]
            rest = [line async for line in lines]
        assert killed == 1
        assert "event: error" in rest
        error = json.loads(rest[rest.index("event: error") + 1][len("data: "):])
        assert error["status"] == 503 and "engine" in error["error"]
        started = time.monotonic()
        while True:
            after = await client.get(f"{base}/chat", params={"prompt": "x", "max_tokens": "4"})
            if after.status_code == 503 or time.monotonic() - started > 5:
                break
            await asyncio.sleep(0.05)
        doc = await status(client, base)
    assert after.status_code == 503
    assert after.json()["reason"] == "engine_dead"
    assert doc["streams"]["open"] == 0 and doc["sessions"]["active"] == 0
