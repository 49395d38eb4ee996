"""The demo on the remote backend under real uvicorn, against misbehaving servers (no vLLM)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from llm_guard_sdk.engines.openai import RemoteEngine
from tests.support import APPS, free_port, read_sse, status, until, uvicorn_server

from .fake_server import PARTIAL, fake_openai
from .test_remote_vllm import APP, remote_env, reset_after_events

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.mark.parametrize("app", sorted(APPS))
async def test_every_demo_app_speaks_the_protocol_on_the_remote_backend(app: str) -> None:
    async with fake_openai("ok") as (url, _state):
        with uvicorn_server(APPS[app], remote_env(url), timeout=60) as base:
            async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
                events = await read_sse(client, f"{base}/chat?prompt=x&max_tokens=3")
                doc = await status(client, base)
    assert events == [("message", "tok")] * 3 + [("done", "{}")]
    assert doc["remote"]["completed_total"] == 1 and doc["remote"]["open_streams"] == 0


async def test_client_reset_closes_the_remote_connection_at_once() -> None:
    """The consumer is cancelled by the guard and again by the SSE reader: the connection to
    the server must still be dropped (not left ACTIVE in httpx's pool)."""
    async with fake_openai("slow") as (url, state):
        with uvicorn_server(APP, remote_env(url), timeout=60) as base:
            await asyncio.to_thread(reset_after_events, base, "/chat?prompt=x&max_tokens=40", 1)
            await until(lambda: state["open"] == 0, timeout=30)
            async with httpx.AsyncClient(timeout=30, trust_env=False) as admin:
                doc = await status(admin, base)
    assert state["connections"] == 1
    assert doc["remote"]["open_streams"] == 0 and doc["remote"]["aborted_total"] == 1


@pytest.mark.parametrize("mode, code, reason", [
    ("garbage", 502, "remote_protocol"),
    ("error500", 503, "remote_error"),
])
async def test_bad_server_answers_are_clear_errors(mode: str, code: int, reason: str) -> None:
    async with fake_openai(mode) as (url, state):
        with uvicorn_server(APP, remote_env(url), timeout=60) as base:
            async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
                response = await client.get(f"{base}/chat", params={"prompt": "x"})
                doc = await status(client, base)
            await until(lambda: state["open"] == 0, timeout=30)
    assert response.status_code == code
    assert response.json()["reason"] == reason and "Traceback" not in response.text
    assert doc["remote"]["open_streams"] == 0


async def test_remote_down_is_a_503_with_retry_after() -> None:
    env = remote_env(f"http://127.0.0.1:{free_port()}/v1")
    with uvicorn_server(APP, env, timeout=60) as base:
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
            response = await client.get(f"{base}/chat", params={"prompt": "x"})
            doc = await status(client, base)
    assert response.status_code == 503
    assert response.headers["retry-after"] == "5"
    assert response.json()["reason"] == "remote_unreachable"
    assert doc["remote"]["open_streams"] == 0 and doc["remote"]["errors_by_status"] == {"503": 1}


async def test_consumer_cancelled_twice_still_drops_the_connection() -> None:
    async with fake_openai("slow") as (url, state):
        engine = RemoteEngine(url, "tiny")
        try:
            stream = engine.stream("x")
            assert await stream.__anext__() == "tok"
            task = asyncio.ensure_future(stream.__anext__())
            await until(lambda: stream.waiting)
            task.cancel()
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await stream.aclose()
            await until(lambda: state["open"] == 0, timeout=30)
            await until(lambda: engine.open_streams == 0, timeout=30)
        finally:
            await engine.aclose()


async def test_held_bytes_include_the_incomplete_event() -> None:
    async with fake_openai("partial") as (url, _state):
        engine = RemoteEngine(url, "tiny")
        stream = engine.stream("x")
        try:
            assert await stream.__anext__() == "tok"
            # one write: a complete event and the start of the next one, held by the decoder
            assert stream.declared_bytes == len(PARTIAL)
        finally:
            await stream.aclose()
            await engine.aclose()
