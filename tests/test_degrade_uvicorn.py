"""The degrade hook under real uvicorn: at the warn level a request's max_tokens is capped."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support import read_sse, status, uvicorn_server

pytestmark = [pytest.mark.e2e, pytest.mark.anyio]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    env = {"LLM_GUARD_SAMPLE_INTERVAL": "0.05", "LLM_GUARD_DEGRADE": "warn",
           "LLM_GUARD_DEGRADE_MIN_TOKENS": "4"}
    with uvicorn_server("tests.support.pressure_app:app", env,
                        ready_path="/llm-guard/ready") as base:
        yield base


async def tokens(client: httpx.AsyncClient, base: str, max_tokens: int) -> int:
    events = await read_sse(client, f"{base}/test/generate?max_tokens={max_tokens}")
    assert events[-1][0] == "done"
    return sum(1 for name, _ in events if name == "token")


async def test_warn_level_caps_max_tokens_by_headroom(server: str) -> None:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        assert await tokens(client, server, 100) == 100  # normal: untouched
        level = await client.post(f"{server}/test/pressure", params={"used": 800})
        assert level.json()["level"] == "warn"
        # headroom = (0.92 - 0.80) / (0.92 - 0.75); cap = ceil(100 * headroom) = 71
        capped = await tokens(client, server, 100)
        floor = await tokens(client, server, 3)  # under min_tokens already: left as asked
        warn = (await status(client, server))["degraded"]
        level = await client.post(f"{server}/test/pressure", params={"used": 910})
        near_shed = await tokens(client, server, 100)  # ceil(100 * 0.01 / 0.17) -> 6
        await client.post(f"{server}/test/pressure", params={"used": 0})
        after = await tokens(client, server, 100)
        doc = (await status(client, server))["degraded"]
    assert (capped, floor, near_shed, after) == (71, 3, 6, 100)
    assert warn == {"max_tokens": 1, "model": 0, "history": 0, "hook_errors": 0,
                    "considered": 2}
    assert doc["max_tokens"] == 2 and doc["considered"] == 3
