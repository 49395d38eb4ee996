"""The soak app on Litestar (routes as in :mod:`tests.proof.apps.soak_fastapi`).

Litestar's ``Request`` has no ``is_disconnected()``; ``/soak/sse-poll`` polls the same way
Starlette does: a ``receive()`` that is cancelled at once unless a message is already there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
from litestar import Litestar, Request, Response, WebSocket, get, post, websocket

from llm_guard_sdk.adapters.litestar import (
    ChatRequest,
    LLMGuardPlugin,
    sse_response,
    websocket_chat,
)
from tests.proof.apps.soak_common import StreamParams, measure, report, soak_tokens


def _poller(request: Request[Any, Any, Any]) -> Any:
    gone = False

    async def is_disconnected() -> bool:
        nonlocal gone
        if not gone:
            with anyio.CancelScope() as scope:
                scope.cancel()
                message = await request.receive()
                gone = message.get("type") == "http.disconnect"
        return gone

    return is_disconnected


def _stream(request: Request[Any, Any, Any], poll: bool) -> Any:
    try:
        params = StreamParams.parse(request.query_params)
    except ValueError as exc:
        return Response({"error": str(exc)}, status_code=400)
    return sse_response(soak_tokens(params, _poller(request) if poll else None), ping=None)


@get("/soak/sse")
async def sse(request: Request[Any, Any, Any]) -> Any:
    return _stream(request, poll=False)


@get("/soak/sse-poll")
async def sse_poll(request: Request[Any, Any, Any]) -> Any:
    return _stream(request, poll=True)


def _answer(request: ChatRequest) -> AsyncIterator[str]:
    return soak_tokens(StreamParams.parse(request.message))


@websocket("/ws/soak")
async def ws_soak(socket: WebSocket[Any, Any, Any]) -> None:
    await websocket_chat(socket, _answer)


@get("/test/soak", sync_to_thread=False)
def soak_report() -> dict[str, Any]:
    return report()


@post("/test/measure", sync_to_thread=False, status_code=200)
def soak_measure() -> dict[str, Any]:
    return measure()


app = Litestar([sse, sse_poll, ws_soak, soak_report, soak_measure], plugins=[LLMGuardPlugin()])
