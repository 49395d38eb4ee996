"""Fault injection end to end (issue 13 §3): real uvicorn, raw-socket clients, all frameworks.

Every test runs its fault next to healthy streams that must complete intact (every token, then
``done``), and ends with the server drained: no session, stream, generator or simulator
request left open (:func:`tests.proof.checks.wait_drained`), no internal error, and a log
without an unexpected traceback. What each adds to the one-client tests elsewhere:

- a generator that raises mid-stream: the client now gets a clear ``error`` event / frame on
  FastAPI, Litestar and Channels alike (before: a silently cut body or a WebSocket closed
  1013/4500 and "Exception in ASGI application" in the log; the fix is in adapters/wire.py);
- a backend that hangs: the guard's chunk timeout ends it with ``evicted`` + ``done`` over SSE
  and WebSocket on each framework, while other streams go on;
- an engine that dies: in test_faults_engine.py;
- slowloris and frozen readers together: trickled headers hold no guard state, frozen SSE
  and WebSocket readers are cut by the send timeout on each framework (tests/asgi/
  test_dead_peers.py: FastAPI, one at a time);
- bad input: oversized headers, forged and invalid session ids / request ids / tenant keys,
  and malformed WebSocket frames (reserved bits, bad opcode, unmasked, invalid UTF-8: the
  protocol layer closes 1002/1007 and the guard closes the session);
- a memory source that fails: status shows it stale with its error, the guard keeps
  serving and recovers when the source does;
- the guard's routes without a token, with a wrong one and through a forwarding proxy
  header: 401 on every framework while streams run (the tokenless 403 cases are in
  tests/asgi/test_control_uvicorn.py).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.proof.checks import SOAK_APPS, SOAK_ENV, snapshot, unexpected_errors, wait_drained
from tests.proof.wire import SSEStream, WSChat, connect, read_head, ws_frame
from tests.support import UvicornServer, sse_events, status, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

TOKEN = "fault-token-1234"
AUTH = {"authorization": f"Bearer {TOKEN}"}
FAULT_APPS = {**SOAK_APPS, "fastapi": "tests.proof.apps.fault_app:app"}
FAULT_ENV = {**SOAK_ENV, "LLM_GUARD_CHUNK_TIMEOUT": "1.5", "LLM_GUARD_STATUS_TOKEN": TOKEN,
             "LLM_GUARD_TENANT_HEADER": "x-tenant"}
HEALTHY_TOKENS = 40


@pytest.fixture(scope="module", params=list(FAULT_APPS))
def server(request: pytest.FixtureRequest) -> Iterator[UvicornServer]:
    srv = UvicornServer(FAULT_APPS[request.param], env={**os.environ, **FAULT_ENV},
                        name=f"faults-{request.param}", ready_path="/test/soak")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        errors = unexpected_errors(srv.log_text(), send_timeouts=100)
        assert errors == [], errors


@pytest.fixture
async def admin(server: UvicornServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60, trust_env=False, headers=AUTH) as client:
        yield client
        await wait_drained(client, server.url)  # every fault ends with nothing left open
        assert (await status(client, server.url))["errors"]["internal_total"] == 0


async def healthy(port: int, streams: int = 5) -> None:
    """``streams`` concurrent SSE and WebSocket streams that must arrive whole."""

    async def sse() -> None:
        client = SSEStream(port, f"/soak/sse?n={HEALTHY_TOKENS}&delay=0.05")
        try:
            assert await client.open() == 200
            result = await client.read()
        finally:
            await client.close()
        assert result.names == ["message"] * HEALTHY_TOKENS + ["done"] and result.complete

    async def ws() -> None:
        client = WSChat(port, "/ws/soak")
        try:
            assert await client.open() == 101
            frames = await client.turn({"prompt": "ok", "n": HEALTHY_TOKENS, "delay": 0.05})
        finally:
            await client.close()
        assert [f["type"] for f in frames] == ["token"] * HEALTHY_TOKENS + ["done"]

    await asyncio.gather(*(sse() if i % 2 else ws() for i in range(streams)))


async def test_generator_raising_mid_stream_gets_a_clear_error(
        server: UvicornServer, admin: httpx.AsyncClient) -> None:
    async def raising_sse() -> list[str]:
        client = SSEStream(server.port, "/soak/sse?n=20&delay=0.05&fail_at=5")
        try:
            assert await client.open() == 200
            return (await client.read()).names
        finally:
            await client.close()

    async def raising_ws() -> list[dict[str, Any]]:
        client = WSChat(server.port, "/ws/soak")
        try:
            assert await client.open() == 101
            first = await client.turn({"prompt": "x", "n": 20, "delay": 0.05, "fail_at": 5})
            again = await client.turn({"prompt": "y", "n": 3})  # the connection stays usable
        finally:
            await client.close()
        return [first[-1], again[-1]]

    before = (await snapshot(admin, server.url))["app"]["generators"]["raised"]
    names, ws, _ = await asyncio.gather(raising_sse(), raising_ws(), healthy(server.port))
    assert names == ["message"] * 5 + ["error"]
    assert ws[0] == {"type": "error", "error": "the model failed while streaming",
                     "status": 500}
    assert ws[1]["type"] == "done"
    assert (await snapshot(admin, server.url))["app"]["generators"]["raised"] == before + 2
    assert "Exception in ASGI application" not in server.log_text()


async def test_hanging_backend_is_ended_by_the_chunk_timeout(
        server: UvicornServer, admin: httpx.AsyncClient) -> None:
    async def hung_sse() -> list[tuple[str, str]]:
        client = SSEStream(server.port, "/soak/sse?n=20&hang_at=3")
        try:
            assert await client.open() == 200
            return (await client.read()).events
        finally:
            await client.close()

    async def hung_ws() -> list[dict[str, Any]]:
        client = WSChat(server.port, "/ws/soak")
        try:
            assert await client.open() == 101
            return await client.turn({"prompt": "x", "n": 20, "hang_at": 3})
        finally:
            await client.close()

    events, frames, _ = await asyncio.gather(hung_sse(), hung_ws(), healthy(server.port))
    assert [e for e, _ in events] == ["message"] * 3 + ["evicted", "done"]
    assert events[3][1] == '{"reason":"timeout"}'  # CloseReason.TIMEOUT
    assert [f["type"] for f in frames] == ["token"] * 3 + ["evicted", "done"]
    assert frames[3]["reason"] == "timeout"


async def test_slowloris_holds_nothing_and_frozen_readers_are_cut(
        server: UvicornServer, admin: httpx.AsyncClient) -> None:
    before = (await status(admin, server.url))["sessions"]["send_timeout_total"]
    request = b"GET /soak/sse?n=3 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    slow = [await connect(server.port) for _ in range(20)]
    for _, writer in slow:  # all but the final CRLF, a byte at a time
        for byte in request[:-2]:
            writer.write(bytes([byte]))
            await writer.drain()
    sse = SSEStream(server.port, "/soak/sse?n=2000&size=65536", rcvbuf=4096)
    ws = WSChat(server.port, "/ws/soak", rcvbuf=4096)
    assert await sse.open() == 200 and await ws.open() == 101
    await ws.send_json({"prompt": "frozen", "n": 2000, "size": 65536})
    try:
        await healthy(server.port)

        async def frozen_cut() -> bool:
            doc = await status(admin, server.url)
            return bool(doc["sessions"]["send_timeout_total"] - before == 2)

        await wait_for(frozen_cut, timeout=60)
        doc = await status(admin, server.url)
        assert doc["sessions"]["active"] + doc["sessions"]["idle"] == 0  # slowloris: none
    finally:
        sse.reset()
        ws.reset()
    for reader, writer in slow:  # finish the headers: each gets its whole stream
        writer.write(b"\r\n")
        await writer.drain()
        code, _ = await read_head(reader)
        body = await reader.read()
        assert code == 200 and body.count(b"data:") == 3 + 1 and b"event: done" in body
        writer.close()


async def test_bad_input_gets_clear_errors_and_leaves_no_state(
        server: UvicornServer, admin: httpx.AsyncClient) -> None:
    async def big_header() -> bytes:
        reader, writer = await connect(server.port)
        writer.write(b"GET /soak/sse?n=2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000
                     + b"\r\n\r\n")
        try:
            await writer.drain()
            return await reader.read()
        except ConnectionError:
            return b"(reset)"
        finally:
            writer.close()

    async def malformed(frame: bytes) -> tuple[int | None, str]:
        client = WSChat(server.port, "/ws/soak")
        assert await client.open() == 101
        await client.send_raw(frame)
        assert await client.frame() is None
        code = client.close_code
        await client.close()
        return code, client.close_reason

    async def forged_ids() -> tuple[str, str, dict[str, Any]]:
        garbage = {"x-llm-guard-session": "sess-../../etc/passwd", "x-request-id": "r" * 500,
                   "x-tenant": "t" * 10_000}
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
            first = await client.get(f"{server.url}/soak/sse?n=1")
            forged = await client.get(f"{server.url}/soak/sse?n=1", headers={
                **garbage, "x-llm-guard-session": first.headers["x-llm-guard-session"]})
            bad = await client.get(f"{server.url}/soak/sse?n=1", headers=garbage)
        assert first.status_code == forged.status_code == bad.status_code == 200
        assert sse_events(forged.text)[-1] == ("done", "{}")
        doc = await status(admin, server.url)
        return (first.headers["x-llm-guard-session"], forged.headers["x-llm-guard-session"],
                doc["tenant_keys"])

    big, codes, ids, _ = await asyncio.gather(
        big_header(),
        asyncio.gather(*(malformed(f) for f in (
            ws_frame(b'{"prompt":"x"}', rsv=0x40), ws_frame(b"x", 0x3),
            bytes([0x81, 0x01]) + b"x", ws_frame(b"\xff\xfe")))),
        forged_ids(), healthy(server.port))
    assert big == b"(reset)" or big.startswith(b"HTTP/1.1 4") or b"event: done" in big, big[:200]
    assert [code for code, _ in codes] == [1002, 1002, 1002, 1007], codes
    assert ids[0] != ids[1] and ids[1].startswith("sess-")  # a forged id is never adopted
    assert ids[2]["invalid_total"] >= 2 and ids[2]["errors_total"] == 0  # default tenant


async def test_failing_memory_source_is_stale_and_the_guard_keeps_serving(
        server: UvicornServer, admin: httpx.AsyncClient) -> None:
    if "fault_app" not in server.app:  # the source's behaviour does not depend on the framework
        pytest.skip("the flaky source is in the FastAPI fault app only")
    assert (await admin.post(f"{server.url}/test/source", params={"failing": "true"})
            ).status_code == 200
    try:
        async def stale() -> bool:
            flaky = (await status(admin, server.url))["memory"]["sources"]["flaky"]
            return bool(flaky["stale"] and flaky["errors_total"] > 0)

        await wait_for(stale, timeout=30)
        await healthy(server.port)  # still serving, every stream whole
        doc = await status(admin, server.url)
        assert "injected read failure" in doc["memory"]["sources"]["flaky"]["last_error"]
        assert doc["level"] == "normal" and doc["memory"]["sources"]["process"]["stale"] is False
    finally:
        await admin.post(f"{server.url}/test/source", params={"failing": "false"})

    async def fresh() -> bool:
        return not (await status(admin, server.url))["memory"]["sources"]["flaky"]["stale"]

    await wait_for(fresh, timeout=30)


async def test_guard_routes_need_the_token_even_through_a_proxy(
        server: UvicornServer, admin: httpx.AsyncClient) -> None:
    proxy = {"x-forwarded-for": "203.0.113.9, 127.0.0.1"}

    async def probe() -> dict[str, int]:
        async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
            url = f"{server.url}/llm-guard/status"
            answers = {"none": await client.get(url),
                       "wrong": await client.get(url, headers={"authorization": "Bearer nope"}),
                       "proxied": await client.get(url, headers=proxy),
                       "proxied+token": await client.get(url, headers={**proxy, **AUTH}),
                       "live": await client.get(f"{server.url}/llm-guard/live", headers=proxy)}
        for name in ("none", "wrong", "proxied"):
            assert answers[name].headers["www-authenticate"] == 'Bearer realm="llm-guard"'
            assert "bearer token" in answers[name].json()["error"]
        return {name: r.status_code for name, r in answers.items()}

    codes, _ = await asyncio.gather(probe(), healthy(server.port))
    assert codes == {"none": 401, "wrong": 401, "proxied": 401, "proxied+token": 200,
                     "live": 200}
