"""An ASGI app for end-to-end tests that need a given pressure level under real uvicorn.

``uvicorn tests.support.pressure_app:app``: a guard whose only source is a
:class:`~tests.support.sources.FakeSource` (limit 1000 bytes). ``POST /test/pressure?used=N``
sets its reading and samples at once (``/test`` is exempt from shedding, beside the default
exempt paths), answering the new level; any other path answers ``200 ok`` when admitted. With
the default thresholds, ``used=950`` sheds and ``used=0`` is normal. The guard also serves the
heap-snapshot route and a control route ``/llm-guard/fail`` whose handler raises (the guard must
answer it with a 500, never pass it to the app). ``GET /test/generate?max_tokens=N`` streams N
SSE ``token`` events through ``guard_stream`` after asking the degrade extension (on with
``LLM_GUARD_DEGRADE``), then ``event: done``. Other settings come from ``LLM_GUARD_*``.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from llm_guard_sdk import GuardMiddleware, guard_stream
from llm_guard_sdk.config import DEFAULT_EXEMPT_PATHS
from llm_guard_sdk.degrade import Degrader, DegradeRequest
from llm_guard_sdk.leaks import enable_snapshots
from tests.support.asgi import serve_lifespan
from tests.support.sources import FakeSource, make_guard

source = FakeSource()
guard = make_guard(source, from_env=True, exempt_paths=(*DEFAULT_EXEMPT_PATHS, "/test"))
enable_snapshots(guard)


def _failing_route(query: dict[str, list[str]]) -> tuple[int, Any]:
    raise RuntimeError("control route bug")


guard.add_control_route("/fail", _failing_route)


async def _respond(send: Any, body: bytes, content_type: bytes = b"text/plain") -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", content_type)]})
    await send({"type": "http.response.body", "body": body})


async def _tokens(count: int) -> Any:
    for i in range(count):
        yield f"event: token\ndata: {i}\n\n".encode()


async def _generate(scope: Any, send: Any) -> None:
    """A stand-in engine request: the degrade hook may lower ``max_tokens`` before it starts."""
    asked = int(parse_qs(scope.get("query_string", b"").decode()).get("max_tokens", ["8"])[0])
    degrader = Degrader.of(guard)
    request = DegradeRequest(max_tokens=asked, backend="test")
    sent = degrader.apply(request) if degrader is not None else request
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})
    async for chunk in guard_stream(_tokens(sent.max_tokens or asked), name="test"):
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"event: done\ndata: {}\n\n"})


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
    elif scope["type"] == "http" and scope["path"] == "/test/pressure":
        query = parse_qs(scope.get("query_string", b"").decode())
        source.used = int(query.get("used", ["0"])[0])
        guard.sample_now()
        level = guard.policy.level.label
        await _respond(send, json.dumps({"level": level}).encode(), b"application/json")
    elif scope["type"] == "http" and scope["path"] == "/test/generate":
        await _generate(scope, send)
    elif scope["type"] == "http":
        await _respond(send, b"ok")


app = GuardMiddleware(_inner, guard=guard)
