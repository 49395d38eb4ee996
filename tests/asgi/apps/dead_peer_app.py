"""An app under real uvicorn for the dead-peer tests: endless SSE and WebSocket floods.

``uvicorn tests.asgi.apps.dead_peer_app:app`` is guarded through the FastAPI adapter (``/test``
exempt, other settings such as ``LLM_GUARD_SEND_TIMEOUT`` from the environment).

- ``GET /flood?size=N&count=C&delay=S``: ``sse_response`` over a generator yielding ``count``
  items (endless without it) of ``size`` characters, ``delay`` seconds apart;
- ``WS /ws/flood``: the chat protocol; each prompt is answered by an endless stream of
  64 KiB tokens;
- ``GET /test/counts``: generators ``started`` and ``closed``, per kind.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

from fastapi import FastAPI, WebSocket

from llm_guard_sdk.adapters.fastapi import (
    ChatRequest,
    GuardedSSEResponse,
    install,
    sse_response,
    websocket_chat,
)
from tests.support.sources import make_guard

counts: Counter[str] = Counter()
app = FastAPI()
install(app, guard=make_guard(from_env=True))


async def _items(kind: str, size: int, count: int | None, delay: float) -> AsyncIterator[str]:
    counts[f"{kind}_started"] += 1
    item = "x" * size
    sent = 0
    try:
        while count is None or sent < count:
            yield item
            sent += 1
            await asyncio.sleep(delay)
    finally:
        counts[f"{kind}_closed"] += 1


@app.get("/flood")
async def flood(size: int = 65536, count: int | None = None,
                delay: float = 0.0) -> GuardedSSEResponse:
    return sse_response(_items("sse", size, count, delay), ping=None)


@app.websocket("/ws/flood")
async def ws_flood(websocket: WebSocket) -> None:
    def answer(request: ChatRequest) -> AsyncIterator[str]:
        return _items("ws", 65536, None, 0.0)

    await websocket_chat(websocket, answer)


@app.get("/test/counts")
async def get_counts() -> dict[str, int]:
    return dict(counts)
