"""End to end under real uvicorn: an adaptive timeout aborts a stalled stream; a breaker opens,
refuses without calling the backend, and recovers through half-open. Counts, not speed."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import read_sse, status, uvicorn_server, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with uvicorn_server("tests.support.apps.control_app:app") as base:
        yield base


async def stats(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    doc: dict[str, Any] = (await client.get(f"{base}/test/stats")).json()
    return doc


async def test_a_stalled_stream_is_timed_out_by_the_learned_limit(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        # Warm the route: fast streams spanning several ticks teach it its latencies.
        warm = await asyncio.gather(*(read_sse(client, f"{server}/stream?n=10&gap=0.03")
                                      for _ in range(30)))
        assert all(events[-1][0] == "done" for events in warm)

        async def learned() -> bool:
            route = (await status(client, server))["timeouts"]["routes"].get("/stream", {})
            return all(bool(route.get(k, {}).get("source") == "adaptive")
                       for k in ("first_token", "inter_chunk"))

        await wait_for(learned, timeout=30)
        route = (await status(client, server))["timeouts"]["routes"]["/stream"]
        assert 1.0 <= route["inter_chunk"]["timeout"] <= 2.0  # fast gaps: clamped
        assert route["inter_chunk"]["samples"] >= 20
        before = await status(client, server)
        counted = await stats(client, server)

        # No static chunk_timeout is set: only the adaptive limit can end this stream.
        events = await read_sse(client, f"{server}/stream?n=5&stall=true")
        assert events == [("message", "chunk 0"), ("evicted", '{"reason":"timeout"}'),
                          ("done", "{}")]

        async def closed() -> bool:
            now = await stats(client, server)
            return bool(now["closed"] == now["started"] == counted["started"] + 1)

        await wait_for(closed, timeout=10)  # the stalled generator was closed
        after = await status(client, server)
        assert after["streams"]["aborted_total"] - before["streams"]["aborted_total"] == 1
        assert after["streams"]["open"] == 0


async def test_a_failing_backend_opens_the_breaker_and_it_recovers(server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        await client.post(f"{server}/test/backend", params={"fail": "true"})
        for _ in range(3):
            response = await client.get(f"{server}/backend")
            assert response.status_code == 503
            assert response.json() == {"error": "fake backend is down"}
        assert (await stats(client, server))["backend_calls"] == 3
        breaker = (await status(client, server))["breakers"]["fake"]
        assert breaker["state"] == "open" and breaker["opened_total"] == 1
        assert breaker["failures_in_window"] == 3

        for _ in range(5):  # refused without touching the backend
            response = await client.get(f"{server}/backend")
            assert response.status_code == 503
            assert 1 <= int(response.headers["retry-after"]) <= 30
            assert "circuit open" in response.json()["error"]
        assert (await stats(client, server))["backend_calls"] == 3

        await client.post(f"{server}/test/backend", params={"fail": "false"})

        await client.post(f"{server}/test/advance", params={"seconds": 30})  # open_for passed
        assert (await status(client, server))["breakers"]["fake"]["state"] == "half_open"
        response = await client.get(f"{server}/backend")  # the probe
        assert response.status_code == 200 and response.json() == {"ok": True}
        assert (await stats(client, server))["backend_calls"] == 4
        breaker = (await status(client, server))["breakers"]["fake"]
        assert breaker["state"] == "closed" and breaker["refused_total"] == 5
