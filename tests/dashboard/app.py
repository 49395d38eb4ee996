"""The app the Chromium test watches: ``uvicorn tests.dashboard.app:app``.

A guard whose only source is a :class:`~tests.support.sources.FakeSource` (limit 1000 bytes),
with the dashboard on. ``POST /test/pressure?used=N`` sets the reading and samples at once
(``/test`` is exempt: it is never shed), answering the new level. ``GET /test/stream?held=N``
streams a token every 0.2 s for up to two minutes through ``guard_stream``, declaring ``N`` held
bytes, so the evictor has victims whose size it knows. Any other path answers ``200 ok`` when
admitted. Settings come from ``LLM_GUARD_*`` (the test sets the token and the tenant header).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import parse_qs

from llm_guard_sdk import GuardMiddleware, guard_stream
from llm_guard_sdk.config import DEFAULT_EXEMPT_PATHS
from tests.support.asgi import serve_lifespan
from tests.support.sources import FakeSource, make_guard

source = FakeSource()
guard = make_guard(source, from_env=True, exempt_paths=(*DEFAULT_EXEMPT_PATHS, "/test/pressure"))


def _query(scope: Any) -> dict[str, list[str]]:
    return parse_qs(scope.get("query_string", b"").decode())


async def _respond(send: Any, body: bytes, content_type: bytes = b"text/plain") -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": body})


async def _tokens() -> Any:
    for n in range(600):
        yield f"data: token {n}\n\n".encode()
        await asyncio.sleep(0.2)


async def _stream(scope: Any, send: Any) -> None:
    held = int(_query(scope).get("held", ["0"])[0])
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    async for chunk in guard_stream(_tokens(), name="test", held=lambda: held):
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
    elif scope["type"] == "http" and scope["path"] == "/test/pressure":
        source.used = int(_query(scope).get("used", ["0"])[0])
        guard.sample_now()
        body = json.dumps({"level": guard.policy.level.label}).encode()
        await _respond(send, body, b"application/json")
    elif scope["type"] == "http" and scope["path"] == "/test/stream":
        await _stream(scope, send)
    elif scope["type"] == "http":
        await _respond(send, b"ok")


app = GuardMiddleware(_inner, guard=guard)
