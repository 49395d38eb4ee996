"""Dead peers under real uvicorn: a client that stops reading is closed as ``send_timeout``.

The frozen clients are raw sockets with a tiny receive buffer that never ``recv()``: the
server's socket buffer fills, uvicorn's ``send`` waits for the drain, and only the guard's
send timeout frees the session and closes the model's generator. Meanwhile a normal client
keeps streaming. Assertions are on state (status counters, generator counts), with generous
timeouts: nothing depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import struct
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import read_sse, status, uvicorn_server, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.usefixtures("hot_path")]

ENV = {"LLM_GUARD_SOURCES": "process", "LLM_GUARD_SAMPLE_INTERVAL": "0.1",
       "LLM_GUARD_EXEMPT_PATHS": "/test", "LLM_GUARD_SEND_TIMEOUT": "1",
       "LLM_GUARD_CLOSE_GRACE": "0.5"}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with uvicorn_server("tests.asgi.apps.dead_peer_app:app", ENV) as base:
        yield base


def frozen_socket(base: str) -> socket.socket:
    """A connected socket that will never read: a 1 KiB receive buffer, set before connect."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect((host, int(port)))
    return sock


def ws_text_frame(text: str) -> bytes:
    """One masked client text frame (RFC 6455)."""
    payload = text.encode()
    mask = os.urandom(4)
    header = bytes([0x81])
    if len(payload) < 126:
        header += bytes([0x80 | len(payload)])
    else:
        header += bytes([0x80 | 126]) + struct.pack("!H", len(payload))
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def counts(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    response = await client.get(f"{base}/test/counts")
    result: dict[str, Any] = response.json()
    return result


async def test_frozen_sse_reader_is_closed_while_another_client_streams(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        before = await status(client, server)
        sock = frozen_socket(server)
        try:
            sock.sendall(b"GET /flood HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
            normal = asyncio.create_task(read_sse(
                client, f"{server}/flood?size=16&count=40&delay=0.05"))

            async def freed() -> bool:
                doc = await status(client, server)
                return bool(doc["sessions"]["send_timeout_total"]
                            > before["sessions"]["send_timeout_total"])

            await wait_for(freed, timeout=60)
            events = await asyncio.wait_for(normal, 60)
        finally:
            sock.close()
        assert [e for e, _ in events].count("message") == 40 and events[-1][0] == "done"

        async def generator_closed() -> bool:
            c = await counts(client, server)
            return bool(c.get("sse_closed", 0) == c.get("sse_started", 0))

        await wait_for(generator_closed, timeout=30)
        after = await status(client, server)
        assert after["sessions"]["send_timeout_total"] == before["sessions"][
            "send_timeout_total"] + 1
        assert after["streams"]["open"] == 0
        assert after["errors"]["internal_total"] == 0


async def test_frozen_websocket_reader_is_closed(server: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        before = await status(client, server)
        sock = frozen_socket(server)
        try:
            key = base64.b64encode(os.urandom(16)).decode()
            sock.sendall((f"GET /ws/flood HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                          "Sec-WebSocket-Version: 13\r\n\r\n").encode())
            handshake = b""
            while b"\r\n\r\n" not in handshake:  # the only read: the 101 answer
                handshake += sock.recv(1)
            assert handshake.startswith(b"HTTP/1.1 101"), handshake
            sock.sendall(ws_text_frame(json.dumps({"prompt": "flood me"})))

            async def freed() -> bool:
                doc = await status(client, server)
                return bool(doc["sessions"]["send_timeout_total"]
                            > before["sessions"]["send_timeout_total"])

            await wait_for(freed, timeout=60)

            async def generator_closed() -> bool:
                c = await counts(client, server)
                return bool(c.get("ws_started", 0) >= 1 and c["ws_closed"] == c["ws_started"])

            await wait_for(generator_closed, timeout=30)
        finally:
            sock.close()

        async def session_gone() -> bool:
            doc = await status(client, server)
            return bool(doc["sessions"]["active"] + doc["sessions"]["idle"] == 0)

        await wait_for(session_gone, timeout=30)
        assert (await status(client, server))["errors"]["internal_total"] == 0
