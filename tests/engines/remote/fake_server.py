"""A tiny misbehaving "OpenAI" server on 127.0.0.1 (raw asyncio): garbage, slow, cut, errors."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

CHUNK = b'data: {"choices":[{"index":0,"text":"tok","finish_reason":null}]}\n\n'
PARTIAL = b'data: {"choices":[{"index":0,"te'


async def _serve(mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 state: dict[str, int]) -> None:
    state["connections"] += 1
    state["open"] += 1
    try:
        await reader.readuntil(b"\r\n\r\n")
        if mode == "garbage":
            body = b"<html>this is not an event stream</html>"
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
        elif mode == "garbage_sse":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"
                         b"data: {not json\n\n")
        elif mode == "slow":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + CHUNK)
            await writer.drain()
            await reader.read()  # never another byte; returns once the client hangs up
        elif mode == "ok":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"connection: close\r\n\r\n" + CHUNK * 3 + b"data: [DONE]\n\n")
        elif mode == "partial":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.write(CHUNK + PARTIAL)
            await writer.drain()
            await reader.read()
        elif mode == "cut":
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n"
                         + hex(len(CHUNK))[2:].encode() + b"\r\n" + CHUNK + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.05)  # then the connection drops mid-body
        elif mode == "error500":
            body = b'{"error":{"message":"boom at /srv/secret.py line 3"}}'
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/"
                         b"json\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
                         + body)
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
        pass
    finally:
        state["open"] -= 1
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


@asynccontextmanager
async def fake_openai(mode: str) -> AsyncIterator[tuple[str, dict[str, int]]]:
    """Serve ``mode``; yield the base URL (``.../v1``) and ``{"connections", "open"}``."""
    state = {"connections": 0, "open": 0}
    server = await asyncio.start_server(lambda r, w: _serve(mode, r, w, state), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1", state
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 5)
