"""End to end under real uvicorn: tenant priorities under real memory pressure, tenant caps.

Memory figures are read from the server's status, never assumed: the limit is the measured RSS
at start plus a headroom, and the ballast is sized from the RSS measured just before, so the
pressure lands between the evict and shed thresholds whatever the process weighs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import InvalidStatus

from tests.support import EVICTED_REASON, status, uvicorn_server, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

APP = "tests.support.apps.tenant_app:app"
MiB = 2**20
HOLD_MIB = 40  # per session; above glibc's mmap threshold, so closing it returns the pages
ENV = {
    "LLM_GUARD_SOURCES": "process",
    "LLM_GUARD_SAMPLE_INTERVAL": "0.1",
    "LLM_GUARD_EXEMPT_PATHS": "/test",
    "LLM_GUARD_MIN_SESSION_AGE": "0",
    "LLM_GUARD_TENANT_HEADER": "x-tenant",
    "LLM_GUARD_TENANT_PRIORITIES": "gold=high,free=low",
}


@contextlib.asynccontextmanager
async def holding(base: str, tenant: str, mib: int) -> AsyncIterator[ClientConnection]:
    url = base.replace("http://", "ws://") + f"/hold?mib={mib}"
    async with websockets.connect(url, additional_headers={"x-tenant": tenant},
                                  ping_interval=None) as ws:
        assert await asyncio.wait_for(ws.recv(), timeout=30) == "held"
        yield ws


async def closed_by_server(ws: ClientConnection) -> tuple[int, str] | None:
    """The close code and reason if the server closed ``ws``, else None (still open)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ws.wait_closed(), timeout=0.01)
    if ws.close_code is None:
        return None
    return ws.close_code, ws.close_reason or ""


async def test_low_priority_tenant_is_evicted_before_high_priority_under_real_pressure() -> None:
    env = {**ENV, "LLM_GUARD_TEST_HEADROOM": "450Mi", "LLM_GUARD_EVICT_AT": "0.80",
           "LLM_GUARD_SHED_AT": "0.95", "LLM_GUARD_HYSTERESIS": "0.05"}
    with uvicorn_server(APP, env) as base:
        async with httpx.AsyncClient(timeout=30) as admin, contextlib.AsyncExitStack() as stack:
            # The high-priority sessions open first: least recently active, as LRU would evict.
            gold = [await stack.enter_async_context(holding(base, "gold", HOLD_MIB))
                    for _ in range(2)]
            free = [await stack.enter_async_context(holding(base, "free", HOLD_MIB))
                    for _ in range(2)]

            async def measured() -> bool:
                doc = await status(admin, base)
                return bool(doc["held"]["attached_bytes"] >= 4 * HOLD_MIB * MiB)

            await wait_for(measured, timeout=10)
            doc = await status(admin, base)
            assert doc["level"] in ("normal", "warn")
            limit, rss = doc["memory"]["limit_bytes"], doc["memory"]["rss_bytes"]
            # Pressure to the evict target (0.75) plus 60 MiB: closing 2 sessions (80 MiB)
            # brings it back under; the free ones are the newest, so only their class can
            # explain that they go.
            ballast = (int(0.75 * limit) + 60 * MiB - rss) // MiB
            assert ballast > 0
            reply = await admin.post(f"{base}/test/ballast", params={"mib": ballast})
            assert reply.status_code == 200

            async def relieved() -> bool:
                doc = await status(admin, base)
                return bool(doc["sessions"]["evicted_total"] >= 2
                            and doc["level"] in ("normal", "warn"))

            await wait_for(relieved, timeout=30)
            for ws in free:
                assert await closed_by_server(ws) == (1013, EVICTED_REASON)
            for ws in gold:
                assert await closed_by_server(ws) is None
                await ws.send("still here")  # the socket works
            doc = await status(admin, base)
            assert doc["sessions"]["evicted_total"] == 2
            assert doc["tenants"]["gold"]["sessions"] == 2
            assert "free" not in doc["tenants"]
            await admin.delete(f"{base}/test/ballast")


async def test_tenant_over_its_cap_gets_429_with_retry_after_while_others_are_served() -> None:
    env = {**ENV, "LLM_GUARD_TENANT_MAX_SESSIONS": "2", "LLM_GUARD_RETRY_AFTER": "4"}
    with uvicorn_server(APP, env) as base:
        async with httpx.AsyncClient(timeout=30) as client, holding(base, "acme", 0), \
                holding(base, "acme", 0):
            refused = await client.get(f"{base}/ok", headers={"x-tenant": "acme"})
            assert refused.status_code == 429
            assert refused.headers["retry-after"] == "4"
            assert refused.json()["reason"] == "tenant_quota"
            with pytest.raises(InvalidStatus) as denied:
                async with holding(base, "acme", 0):
                    pass
            assert denied.value.response.status_code == 429
            served: list[Any] = [await client.get(f"{base}/ok", headers={"x-tenant": t})
                                 for t in ("globex", "initech")]
            assert [r.status_code for r in served] == [200, 200]
            assert (await client.get(f"{base}/ok")).status_code == 200  # the default tenant
            doc = await status(client, base)
            acme = doc["tenants"]["acme"]
            assert (acme["sessions"], acme["refused_total"]) == (2, 2)
            assert acme["held_bytes"] < 1024  # two empty buffers, once measured
            assert doc["actions"]["shed_by_reason"] == {"tenant_quota": 2}
        async def released() -> bool:
            return bool((await client_ok(base, "acme")) == 200)

        await wait_for(released, timeout=10)


async def client_ok(base: str, tenant: str) -> int:
    async with httpx.AsyncClient(timeout=30) as client:
        return (await client.get(f"{base}/ok", headers={"x-tenant": tenant})).status_code
