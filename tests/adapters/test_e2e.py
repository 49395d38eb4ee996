"""End to end, per framework: each demo app under a real uvicorn subprocess, real clients.

The three demos speak one protocol, so every test here runs against FastAPI, Litestar and
Django Channels alike (simulated backend; the vLLM variants are in test_vllm_adapters.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
import websockets
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.support import (
    APPS,
    BASE_ENV,
    EVICTED_REASON,
    chat_turn,
    read_sse,
    stats,
    status,
    uvicorn_server,
    wait_for,
    wait_for_level,
)

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

FRAMEWORKS = list(APPS)
SERVER_ENV = {**BASE_ENV, "LLM_GUARD_MAX_MESSAGE_BYTES": "4096"}


@pytest.fixture(scope="module", params=FRAMEWORKS)
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    with uvicorn_server(APPS[request.param], SERVER_ENV) as base:
        yield base


def ws_url(base: str) -> str:
    return base.replace("http://", "ws://") + "/ws/chat"


async def drained(admin: httpx.AsyncClient, base: str) -> bool:
    doc = await status(admin, base)
    sessions = doc["sessions"]["active"] + doc["sessions"]["idle"]
    return sessions == 0 and doc["streams"]["open"] == 0 and (await stats(admin, base))[
        "open"] == 0


async def test_sse_chat_streams_to_completion(server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        events = await read_sse(client, f"{server}/chat?prompt=hello&max_tokens=6")
        assert [e for e, _ in events] == ["message"] * 6 + ["done"]
        assert all(data for _, data in events[:-1])
        await wait_for(lambda: drained(client, server), timeout=2)


async def test_sse_bad_input_is_a_plain_400_and_releases_the_session(server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        response = await client.get(f"{server}/chat", params={"prompt": "x", "max_tokens": "-3"})
        assert response.status_code == 400
        assert "max_tokens" in response.json()["error"]
        await wait_for(lambda: drained(client, server), timeout=2)


async def test_websocket_multi_turn_keeps_history_on_the_session(server: str) -> None:
    async with websockets.connect(ws_url(server)) as ws, httpx.AsyncClient() as admin:
        for turn in (1, 2):
            frames = await chat_turn(ws, f"turn {turn}", 4)
            assert [f["type"] for f in frames] == ["token"] * 4 + ["done"]
            assert frames[-1]["turns"] == turn  # the history attached to the session grows
        await ws.send("not json")
        assert json.loads(await ws.recv())["type"] == "error"  # and the connection stays
        await ws.send(json.dumps({"prompt": "x", "max_tokens": 0}))
        assert json.loads(await ws.recv())["type"] == "error"
        frames = await chat_turn(ws, "turn 3", 2)
        assert frames[-1] == {"type": "done", "turns": 3}
        doc = await status(admin, server)
        assert doc["sessions"]["idle"] == 1  # between prompts the socket is idle
    async with httpx.AsyncClient() as admin:
        await wait_for(lambda: drained(admin, server), timeout=2)


async def test_abrupt_sse_disconnect_closes_the_generator(server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as admin:
        await wait_for(lambda: drained(admin, server), timeout=2)
        before = (await status(admin, server))["streams"]["disconnected_total"]
        async with httpx.AsyncClient(timeout=30) as client:
            events = await read_sse(client, f"{server}/chat?prompt=long&max_tokens=4000",
                                    drop_after=2)
        assert len(events) == 2
        await wait_for(lambda: drained(admin, server), timeout=2)
        doc = await status(admin, server)
        assert doc["streams"]["disconnected_total"] == before + 1


async def test_websocket_disconnect_mid_stream_closes_the_generator(server: str) -> None:
    async with httpx.AsyncClient(timeout=30) as admin:
        await wait_for(lambda: drained(admin, server), timeout=2)
        ws = await websockets.connect(ws_url(server))
        await ws.send(json.dumps({"prompt": "long", "max_tokens": 4000}))
        assert json.loads(await ws.recv())["type"] == "token"
        ws.transport.abort()  # no close handshake: the TCP connection just goes away
        await wait_for(lambda: drained(admin, server), timeout=3)
        started = (await stats(admin, server))["started"]
        assert started >= 1


@pytest.mark.parametrize(("frame", "code", "reason"), [
    (b'{"prompt": "x"}', 1003, "binary frames are not supported; send JSON text"),
    ("x" * 5000, 1009, "message too big"),
    (json.dumps({"prompt": "é" * 2100}), 1009, "message too big"),  # 4200 bytes, 2100 chars
])
async def test_websocket_bad_frames_close_with_a_clear_code(
        server: str, frame: str | bytes, code: int, reason: str) -> None:
    async with websockets.connect(ws_url(server)) as ws:
        await ws.send(frame)
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None
    assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (code, reason)
    async with httpx.AsyncClient() as admin:
        await wait_for(lambda: drained(admin, server), timeout=2)


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_pressure_evicts_idle_websocket_refuses_new_work_then_recovers(
        framework: str) -> None:
    env = {**BASE_ENV, "LLM_GUARD_MEMORY_LIMIT": "400MiB", "LLM_GUARD_MIN_SESSION_AGE": "0",
           "LLM_GUARD_RETRY_AFTER": "3"}
    with uvicorn_server(APPS[framework], env) as base:
        async with httpx.AsyncClient(timeout=30) as admin:
            assert (await status(admin, base))["level"] == "normal"
            idle = await websockets.connect(ws_url(base))
            assert (await chat_turn(idle, "hello", 2))[-1]["turns"] == 1

            async def long_stream() -> list[tuple[str, str]]:
                async with httpx.AsyncClient(timeout=60) as client:
                    return await read_sse(client, f"{base}/chat?prompt=s&max_tokens=4000")

            stream = asyncio.create_task(long_stream())

            async def streaming() -> bool:
                doc = await status(admin, base)
                return bool(doc["streams"]["open"] == 1 and doc["sessions"]["idle"] == 1)

            await wait_for(streaming, timeout=5)
            response = await admin.post(f"{base}/test/ballast", params={"mib": 420})
            assert response.status_code == 200

            # The idle socket is closed with 1013 and the reason; the running stream is told.
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(idle.recv(), timeout=10)
            assert closed.value.rcvd is not None
            assert (closed.value.rcvd.code, closed.value.rcvd.reason) == (1013, EVICTED_REASON)
            events = await asyncio.wait_for(stream, timeout=10)
            assert ("evicted", '{"reason":"evicted"}') in events
            assert events[-1][0] == "done"

            await wait_for_level(admin, base, "shed", timeout=5)
            refused = await admin.get(f"{base}/chat", params={"prompt": "new"})
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "3"
            with pytest.raises(InvalidStatus) as denied:
                await websockets.connect(ws_url(base))
            assert denied.value.response.status_code == 503
            doc = await status(admin, base)
            assert doc["sessions"]["evicted_total"] >= 2

            await admin.delete(f"{base}/test/ballast")  # pressure gone

            await wait_for_level(admin, base, "normal", timeout=10)
            events = await read_sse(admin, f"{base}/chat?prompt=back&max_tokens=3")
            assert events[-1][0] == "done" and len(events) == 4
            async with websockets.connect(ws_url(base)) as ws:
                assert (await chat_turn(ws, "back", 2))[-1] == {"type": "done", "turns": 1}
            await wait_for(lambda: drained(admin, base), timeout=3)
