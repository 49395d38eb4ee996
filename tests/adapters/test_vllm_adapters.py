"""The Litestar and Channels demos on a real vLLM engine (the FastAPI demo: tests/engines/vllm).

Skipped where vLLM cannot be imported. A dropped client must leave no unfinished request.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from tests.support import APPS, VLLM_ENV, read_sse, status, uvicorn_server, wait_for

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed", allow_module_level=True)

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.e2e]

SERVER_ENV = {**VLLM_ENV, "LLM_GUARD_MEMORY_LIMIT": "6GiB"}


@pytest.fixture(scope="module", params=["litestar", "channels"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

    ensure_tiny_model()  # build it once here rather than inside the server's startup
    with uvicorn_server(APPS[request.param], SERVER_ENV, timeout=180) as base:
        yield base


async def drained(client: httpx.AsyncClient, base: str) -> bool:
    doc = await status(client, base)
    return bool(doc["vllm"]["unfinished"] == 0 and doc["streams"]["open"] == 0
                and doc["sessions"]["active"] + doc["sessions"]["idle"] == 0)


async def test_sse_completes_and_a_dropped_client_aborts_its_request(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as admin:
        events = await read_sse(admin, f"{server}/chat?prompt=hello&max_tokens=8")
        assert events[-1] == ("done", "{}") and len(events) >= 2
        await wait_for(lambda: drained(admin, server), timeout=10)
        before: dict[str, Any] = (await status(admin, server))["vllm"]
        async with httpx.AsyncClient(timeout=60) as client:
            await read_sse(client, f"{server}/chat?prompt=drop&max_tokens=400", drop_after=2)
        await wait_for(lambda: drained(admin, server), timeout=3, interval=0.02)
        after = (await status(admin, server))["vllm"]
    assert after["aborted_total"] == before["aborted_total"] + 1


async def test_websocket_chat_then_disconnect_mid_stream(server: str) -> None:
    ws_url = server.replace("http://", "ws://") + "/ws/chat"
    async with websockets.connect(ws_url) as ws:
        for turn in (1, 2):
            await ws.send(json.dumps({"prompt": f"turn {turn}", "max_tokens": 6}))
            while (frame := json.loads(await ws.recv()))["type"] == "token":
                pass
            assert frame == {"type": "done", "turns": turn}
        await ws.send(json.dumps({"prompt": "long", "max_tokens": 400}))
        assert json.loads(await ws.recv())["type"] == "token"
    async with httpx.AsyncClient(timeout=60) as admin:
        await wait_for(lambda: drained(admin, server), timeout=3, interval=0.02)


async def test_rejected_prompt_is_a_plain_400(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.get(f"{server}/chat", params={"prompt": "word " * 700})
        assert response.status_code == 400
        assert "maximum context length" in response.json()["error"]
        await wait_for(lambda: drained(client, server), timeout=3)
