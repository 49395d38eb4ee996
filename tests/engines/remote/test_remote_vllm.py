"""The demo on the remote backend under real uvicorn, streaming from a real ``vllm serve``.

Every close cause (a client reset, the guard's stream timeout, an eviction) must close the HTTP
stream to the server so that vLLM aborts the request: its own ``/metrics`` shows no request
running and its generation counter stops growing. Bounds are generous; nothing asserts speed.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from llm_guard_sdk.engines.openai import RemoteEngine
from tests.support import status, uvicorn_server, wait_for
from tests.support.vllm_server import MODEL_NAME, VLLMServer

pytestmark = [pytest.mark.anyio, pytest.mark.vllm, pytest.mark.e2e]

APP = "tests.support.apps.e2e_app:app"
LONG = 400  # tokens; at least several seconds of generation on CPU (ignore_eos keeps it going)


def remote_env(api: str, **extra: str) -> dict[str, str]:
    return {"LLM_GUARD_DEMO_BACKEND": "remote", "LLM_GUARD_DEMO_REMOTE_URL": api,
            "LLM_GUARD_DEMO_MODEL": MODEL_NAME,
            "LLM_GUARD_DEMO_REMOTE_PARAMS": '{"ignore_eos": true}',
            "LLM_GUARD_SOURCES": "process", "LLM_GUARD_SAMPLE_INTERVAL": "0.05",
            "LLM_GUARD_EXEMPT_PATHS": "/test", **extra}


@pytest.fixture(scope="module")
def demo(vllm_serve: VLLMServer) -> Iterator[str]:
    env = remote_env(vllm_serve.api, LLM_GUARD_MEMORY_LIMIT="1GiB",
                     LLM_GUARD_MIN_SESSION_AGE="0")
    with uvicorn_server(APP, env, timeout=120) as base:
        yield base


async def remote_idle(vllm: VLLMServer, client: httpx.AsyncClient) -> bool:
    samples = await vllm.metrics(client)
    return samples["vllm:num_requests_running"] + samples["vllm:num_requests_waiting"] == 0


async def remote_running(vllm: VLLMServer, client: httpx.AsyncClient) -> bool:
    return (await vllm.metrics(client))["vllm:num_requests_running"] >= 1


async def generation_stopped(vllm: VLLMServer, client: httpx.AsyncClient) -> float:
    """Wait until nothing runs, check the generation counter is still a while later."""
    waited = await wait_for(lambda: remote_idle(vllm, client), timeout=60)
    first = (await vllm.metrics(client))["vllm:generation_tokens_total"]
    await asyncio.sleep(1.0)
    assert (await vllm.metrics(client))["vllm:generation_tokens_total"] == first
    return waited


def reset_after_events(base: str, path: str, events: int) -> None:
    """GET an SSE stream on a raw socket and reset the connection (RST) mid-stream."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=60)
    try:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        seen = b""
        while seen.count(b"\ndata:") < events:
            chunk = sock.recv(4096)
            assert chunk, seen[-300:]
            seen += chunk
        assert seen.startswith(b"HTTP/1.1 200"), seen[:200]
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()


async def test_client_reset_aborts_the_remote_request(demo: str, vllm_serve: VLLMServer) -> None:
    async with httpx.AsyncClient(timeout=60, trust_env=False) as admin:
        await wait_for(lambda: remote_idle(vllm_serve, admin), timeout=60)
        before = (await vllm_serve.metrics(admin))["vllm:generation_tokens_total"]
        remote_before = (await status(admin, demo))["remote"]
        await asyncio.to_thread(reset_after_events, demo,
                                f"/chat?prompt=reset&max_tokens={LONG}", 3)
        reset_at = time.monotonic()
        waited = await generation_stopped(vllm_serve, admin)
        generated = (await vllm_serve.metrics(admin))["vllm:generation_tokens_total"] - before
        doc = await status(admin, demo)
    print(f"client reset -> remote running==0 after {time.monotonic() - reset_at:.3f}s "
          f"(poll {waited:.3f}s); {generated:.0f} of {LONG} tokens generated")
    assert generated < LONG  # aborted, not run to max_tokens
    remote = doc["remote"]
    assert remote["open_streams"] == 0
    assert remote["aborted_total"] == remote_before["aborted_total"] + 1
    assert remote["completed_total"] == remote_before["completed_total"]
    assert doc["streams"]["open"] == 0


async def test_eviction_closes_the_remote_stream(demo: str, vllm_serve: VLLMServer) -> None:
    async with httpx.AsyncClient(timeout=60, trust_env=False) as admin:
        await wait_for(lambda: remote_idle(vllm_serve, admin), timeout=60)
        before = await status(admin, demo)

        async def long_stream() -> list[str]:
            async with httpx.AsyncClient(timeout=120, trust_env=False) as client, \
                    client.stream("GET", f"{demo}/chat?prompt=evict&max_tokens={LONG}") as r:
                return [line async for line in r.aiter_lines()]

        task = asyncio.create_task(long_stream())
        await wait_for(lambda: remote_running(vllm_serve, admin), timeout=60)
        rss = (await status(admin, demo))["memory"]["rss_bytes"]
        await admin.post(f"{demo}/test/ballast", params={"mib": max(64, (2**30 - rss) // 2**20
                                                                    + 100)})
        try:
            lines = await asyncio.wait_for(task, timeout=60)
            await generation_stopped(vllm_serve, admin)
            doc = await status(admin, demo)
        finally:
            await admin.delete(f"{demo}/test/ballast")
    assert "event: evicted" in lines
    assert doc["sessions"]["evicted_total"] == before["sessions"]["evicted_total"] + 1
    assert doc["remote"]["open_streams"] == 0
    assert doc["remote"]["aborted_total"] == before["remote"]["aborted_total"] + 1


async def test_stream_timeout_closes_the_remote_stream(vllm_serve: VLLMServer) -> None:
    env = remote_env(vllm_serve.api, LLM_GUARD_STREAM_TIMEOUT="1")
    with uvicorn_server(APP, env, timeout=120) as base:
        async with httpx.AsyncClient(timeout=120, trust_env=False) as admin:
            await wait_for(lambda: remote_idle(vllm_serve, admin), timeout=60)
            async with admin.stream("GET", f"{base}/chat?prompt=t&max_tokens={LONG}") as r:
                assert r.status_code == 200
                lines = [line async for line in r.aiter_lines()]
            await generation_stopped(vllm_serve, admin)
            doc = await status(admin, base)
    assert "event: evicted" in lines  # the guard's timeout, told to the client
    assert doc["remote"]["open_streams"] == 0 and doc["remote"]["aborted_total"] == 1


async def test_validation_error_of_the_server_is_a_400(demo: str) -> None:
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        response = await client.get(f"{demo}/chat", params={"prompt": "x", "max_tokens": 4000})
    assert response.status_code == 400
    assert "max_model_len" in response.json()["error"]


async def test_remote_engine_direct_disconnect(vllm_serve: VLLMServer) -> None:
    """Without a web server: aclose() after a few deltas aborts the request on the server."""
    engine = RemoteEngine(vllm_serve.api, MODEL_NAME)
    async with httpx.AsyncClient(timeout=60, trust_env=False) as admin:
        try:
            await wait_for(lambda: remote_idle(vllm_serve, admin), timeout=60)
            stream = engine.stream(messages=[{"role": "user", "content": "hi"}],
                                   max_tokens=LONG, params={"ignore_eos": True})
            deltas = [await stream.__anext__() for _ in range(3)]
            assert engine.open_streams == 1 and len(deltas) == 3
            await stream.aclose()
            assert engine.open_streams == 0
            await generation_stopped(vllm_serve, admin)
        finally:
            await engine.aclose()
    assert engine.status()["aborted_total"] == 1


async def test_guard_middleware_inside_vllm_serve(vllm_serve: VLLMServer) -> None:
    """``--middleware llm_guard_sdk.GuardMiddleware``: the server's own streaming routes are
    sessions; a client that leaves mid-stream closes its session and vLLM aborts."""
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        await wait_for(lambda: remote_idle(vllm_serve, client), timeout=60)
        before = await status(client, vllm_serve.url)
        body = {"model": MODEL_NAME, "prompt": "hi", "max_tokens": LONG, "stream": True,
                "ignore_eos": True}
        async with client.stream("POST", vllm_serve.api + "/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.aiter_lines()
            assert (await anext(lines)).startswith("data: ")
            await lines.aclose()
        await generation_stopped(vllm_serve, client)

        async def closed() -> bool:
            doc = await status(client, vllm_serve.url)
            return bool(doc["sessions"]["active"] == 0)

        await wait_for(closed, timeout=30)
        after = await status(client, vllm_serve.url)
    assert after["sessions"]["opened_total"] > before["sessions"]["opened_total"]
    assert after["sessions"]["closed_total"] == after["sessions"]["opened_total"]
