"""An app under real uvicorn for the receive-path tests: disconnect polling, uploads, quiet sockets.

``uvicorn tests.asgi.apps.flow_app:app`` is guarded (a pressure-free fake source, ``/test``
exempt, other settings from ``LLM_GUARD_*``); ``...:plain`` is the same app without the guard,
to compare against. ``GET /test/counts`` reports what the app saw; ``POST /test/release`` lets
the upload and WebSocket handlers go on.

- ``GET /poll-then-stream``: a Starlette ``StreamingResponse`` whose generator polls
  ``request.is_disconnected()`` once, then streams forever (spec 2.3: Starlette listens for the
  disconnect beside it); ``closed`` counts generators that were closed.
- ``POST /upload``: reads one body message, then streams slowly, never reading again, until
  released; ``upload_bytes`` / ``upload_chunks`` count what it read.
- ``/ws/quiet``: accepts and reads nothing until released; then records the disconnect code.
- ``/ws/idle``: a chat connection between prompts: waits in ``receive()``, echoes each text
  frame, records the disconnect code (``idle_disconnect_code``) and whether the guard held a
  receive pump while the app waited (``idle_pumps_seen``).
- ``/ws/stream``: takes one prompt, then streams frames from a guarded stream, never reading,
  until the stream is stopped (``ws_stream_closed``).
- ``POST /test/evict``: closes every open WebSocket session as ``evicted`` (the guard's own
  close sequence, as memory pressure would).

Every WebSocket's server ``receive`` is wrapped to count overlapping calls
(``server_receive_overlaps``): the guard must never read it from two tasks at once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from llm_guard_sdk import CloseReason, GuardMiddleware, guard_stream
from llm_guard_sdk.asgi.websocket import WebSocketConnection
from tests.support.sources import make_guard

counts: Counter[str] = Counter()
released = asyncio.Event()
api = FastAPI()


@api.get("/poll-then-stream")
async def poll_then_stream(request: Request) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        counts["started"] += 1
        try:
            await request.is_disconnected()
            while True:
                yield b"chunk\n"
                await asyncio.sleep(0.05)
        finally:
            counts["closed"] += 1

    return StreamingResponse(body(), media_type="text/plain")


@api.get("/test/counts")
async def get_counts() -> dict[str, int]:
    return dict(counts)


@api.post("/test/release")
async def release() -> dict[str, bool]:
    released.set()
    return {"released": True}


async def upload(receive: Any, send: Any) -> None:
    message = await receive()
    counts["upload_chunks"] += 1
    counts["upload_bytes"] += len(message.get("body", b""))
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    while not released.is_set():
        await send({"type": "http.response.body", "body": b".", "more_body": True})
        await asyncio.sleep(0.05)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def quiet_websocket(receive: Any, send: Any) -> None:
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    await released.wait()
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            counts["ws_disconnect_code"] = message.get("code", 0)
            return


async def idle_websocket(scope: Any, receive: Any, send: Any) -> None:
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    session = scope["llm_guard.session"]
    while True:
        message = await receive()
        conn = session.connection
        if isinstance(conn, WebSocketConnection) and conn.pumping:
            counts["idle_pumps_seen"] += 1
        if message["type"] == "websocket.disconnect":
            counts["idle_disconnect_code"] = message.get("code", 0)
            return
        await send({"type": "websocket.send", "text": "echo:" + message.get("text", "")})


async def tokens() -> AsyncIterator[str]:
    while True:
        yield "t"
        await asyncio.sleep(0.02)


async def streaming_websocket(receive: Any, send: Any) -> None:
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    await receive()  # the prompt
    try:
        async with guard_stream(tokens(), name="ws") as stream:
            async for token in stream:
                await send({"type": "websocket.send", "text": token})
    finally:
        counts["ws_stream_closed"] += 1


async def plain(scope: Any, receive: Any, send: Any) -> None:
    """Raw ASGI for the handlers whose receive pattern must stay exactly as written."""
    path = scope.get("path")
    if scope["type"] == "http" and path == "/upload":
        await upload(receive, send)
    elif scope["type"] == "http" and path == "/test/evict":
        await evict(send)
    elif scope["type"] == "websocket" and path == "/ws/quiet":
        await quiet_websocket(receive, send)
    elif scope["type"] == "websocket" and path == "/ws/idle":
        await idle_websocket(scope, receive, send)
    elif scope["type"] == "websocket" and path == "/ws/stream":
        await streaming_websocket(receive, send)
    else:
        await api(scope, receive, send)


async def evict(send: Any) -> None:
    sessions = [s for s in guarded.guard.registry if s.kind == "websocket"]
    for session in sessions:
        await guarded.guard.close_session(session, CloseReason.EVICTED)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"%d" % len(sessions)})


def counting_receives(inner: Any) -> Any:
    """Count overlapping calls of each WebSocket's server ``receive`` (must stay 0)."""
    async def wrapper(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            await inner(scope, receive, send)
            return
        active = [0]

        async def counted() -> Any:
            active[0] += 1
            if active[0] > 1:
                counts["server_receive_overlaps"] += 1
            try:
                return await receive()
            finally:
                active[0] -= 1

        await inner(scope, counted, send)

    return wrapper


guarded = GuardMiddleware(plain, guard=make_guard(from_env=True, exempt_paths=("/test",)))
app = counting_receives(guarded)
