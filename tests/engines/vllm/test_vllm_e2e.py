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


async def test_dropped_client_aborts_vllm_request(server: str) -> None:
    """State, not speed: the request is aborted, not run to max_tokens (the latency from the
    client's close to the abort is measured in docs/benchmarks.md, not asserted here)."""
    async with httpx.AsyncClient(timeout=60) as admin:
        await wait_for(lambda: drained(admin, server), timeout=60)
        before = (await status(admin, server))["vllm"]
        async with httpx.AsyncClient(timeout=60) as client:
            await read_sse(client, f"{server}/chat?prompt=drop&max_tokens=4000", drop_after=2)
        await wait_for(lambda: drained(admin, server), timeout=60)
        doc = await status(admin, server)
    assert doc["vllm"]["aborted_total"] == before["aborted_total"] + 1
    assert doc["vllm"]["completed_total"] == before["completed_total"]  # not run to the end
    assert doc["vllm"]["errors_total"] == before["errors_total"]
    assert doc["streams"]["disconnected_total"] >= 1


async def test_twenty_streams_thirty_percent_dropped(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as admin:
        await wait_for(lambda: drained(admin, server), timeout=60)
        before = (await status(admin, server))["vllm"]

        async def one(i: int) -> list[tuple[str, str]]:
            drop = i % 10 in (1, 4, 7)  # 6 of 20
            async with httpx.AsyncClient(timeout=300) as client:
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
        await wait_for(lambda: drained(admin, server), timeout=60)
        before = await status(admin, server)

        async def long_stream() -> list[tuple[str, str]]:
            async with httpx.AsyncClient(timeout=60) as client:
                return await read_sse(client, f"{server}/chat?prompt=evictme&max_tokens=4000")

        task = asyncio.create_task(long_stream())

        async def streaming() -> bool:
            return bool((await status(admin, server))["vllm"]["unfinished"] == 1)

        await wait_for(streaming, timeout=60)
        rss = (await status(admin, server))["memory"]["rss_bytes"]
        ballast_mib = max(64, (6 * 2**30 - rss) // 2**20 + 200)
        await admin.post(f"{server}/test/ballast", params={"mib": ballast_mib})
        try:
            events = await asyncio.wait_for(task, timeout=60)
            doc = await status(admin, server)
        finally:
            await admin.delete(f"{server}/test/ballast")
        assert ("evicted", '{"reason":"evicted"}') in events
        assert doc["vllm"]["unfinished"] == 0
        assert doc["vllm"]["aborted_total"] == before["vllm"]["aborted_total"] + 1
        assert doc["sessions"]["evicted_total"] == before["sessions"]["evicted_total"] + 1

        async def normal() -> bool:
            return bool((await status(admin, server))["level"] == "normal")

        await wait_for(normal, timeout=60)


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
           "LLM_GUARD_DEMO_MAX_MODEL_LEN": "512", "LLM_GUARD_RETRY_AFTER": "2",
           "LLM_GUARD_BREAKERS": "1", "LLM_GUARD_BREAKER_OPEN_FOR": "600"}
    with uvicorn_server("tests.support.apps.e2e_app:app", env, timeout=180) as base:
        yield base


async def test_kv_pressure_refuses_engine_requests_only_then_resumes(kv_server: str) -> None:
    base = kv_server
    async with httpx.AsyncClient(timeout=300) as admin:
        async def one(i: int) -> list[tuple[str, str]]:
            async with httpx.AsyncClient(timeout=300) as client:
                return await read_sse(client, f"{base}/chat?prompt=kv{i}&max_tokens=480")

        tasks = [asyncio.create_task(one(i)) for i in range(6)]
        seen: dict[str, Any] = {}

        async def kv_full() -> bool:
            doc = await status(admin, base)
            if doc["vllm"]["kv_level"] == "shed":
                seen.update(doc)
                return True
            return False

        await wait_for(kv_full, timeout=300, interval=0.02)
        refused = await admin.get(f"{base}/chat", params={"prompt": "new", "max_tokens": "4"})
        unrelated = await admin.get(f"{base}/openapi.json")  # an app route, not the engine's
        ready = await admin.get(f"{base}/llm-guard/ready")
        during = await status(admin, base)
        results = await asyncio.gather(*tasks)

        async def kv_normal() -> bool:
            return bool((await status(admin, base))["vllm"]["kv_level"] == "normal")

        await wait_for(kv_normal, timeout=300)
        resumed = await read_sse(admin, f"{base}/chat?prompt=again&max_tokens=4")
        after = await status(admin, base)
    assert seen["memory"]["sources"]["vllm_kv"]["pressure"] >= 0.92
    assert seen["memory"]["sources"]["vllm_kv"]["advisory"] is True
    assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
    assert refused.json()["reason"] == "kv_cache_pressure"  # never "memory_pressure"
    assert unrelated.status_code == 200 and ready.status_code == 200
    assert "shed" not in (seen["level"], during["level"])  # the app's level ignores the KV cache
    assert "memory_pressure" not in after["actions"]["shed_by_reason"]
    assert after["vllm"]["refused_by_reason"]["kv_cache_pressure"] >= 1
    assert after["breakers"]["vllm"]["state"] == "closed"  # a full cache is load, not failure
    assert all(r[-1][0] == "done" for r in results)  # running requests are never cut
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
            if after.status_code == 503 or time.monotonic() - started > 30:
                break
            await asyncio.sleep(0.05)
        doc = await status(client, base)
    assert after.status_code == 503
    # The EngineDeadError mid-stream tripped the breaker: later requests never reach the engine.
    assert after.json()["reason"] == "circuit_open"
    assert int(after.headers["retry-after"]) > 2  # the open time left, not the shed default
    breaker = doc["breakers"]["vllm"]
    assert breaker["state"] == "open" and breaker["failures_total"].get("dead", 0) >= 1
    assert doc["vllm"]["refused_by_reason"]["circuit_open"] >= 1
    assert doc["streams"]["open"] == 0 and doc["sessions"]["active"] == 0
