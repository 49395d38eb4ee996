"""The soak app on FastAPI, with a Starlette ``BaseHTTPMiddleware`` elsewhere in the stack.

``uvicorn tests.proof.apps.soak_fastapi:app``; settings from ``LLM_GUARD_*``. Routes (see
:mod:`tests.proof.apps.soak_common` for the parameters):

- ``GET /soak/sse``: SSE via the adapter's ``sse_response``; ``GET /soak/sse-poll``: the same,
  its generator polling ``request.is_disconnected()`` before every token;
- ``WS /ws/soak``: the chat protocol, each frame's parameters next to its prompt;
- ``GET /test/soak``: generator and backend counters, RSS; ``POST /test/measure``: the same
  after ``gc.collect()`` and ``malloc_trim(0)``.

``SOAK_BACKEND=vllm``: the tokens come from a real vLLM engine started in the lifespan (see
:mod:`tests.proof.apps.soak_vllm`, which adds ``POST /test/engine-probe``); default: the
simulator.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response, WebSocket
from fastapi.responses import JSONResponse
from starlette.middleware.base import BaseHTTPMiddleware

from llm_guard_sdk.adapters.fastapi import ChatRequest, install, sse_response, websocket_chat
from tests.proof.apps import soak_common
from tests.proof.apps.soak_common import StreamParams, measure, report, soak_tokens

BACKEND = os.environ.get("SOAK_BACKEND", "simulator")
if BACKEND == "vllm":
    from tests.proof.apps import soak_vllm

    app = FastAPI(lifespan=soak_vllm.vllm_lifespan(lambda: guard, soak_common.use_backend))
    app.include_router(soak_vllm.router)
elif BACKEND == "simulator":
    app = FastAPI()
else:
    raise RuntimeError(f"SOAK_BACKEND={BACKEND!r}: expected 'simulator' or 'vllm'")


class Stamp(BaseHTTPMiddleware):
    """A typical user middleware: it wraps every response (and its body stream)."""

    async def dispatch(self, request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers["x-soak"] = "1"
        return response


app.add_middleware(Stamp)
guard = install(app)  # outermost: the guard sees every connection first


def _stream(request: Request, poll: bool) -> Response:
    try:
        params = StreamParams.parse(request.query_params)
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    return sse_response(soak_tokens(params, request.is_disconnected if poll else None),
                        ping=None)


@app.get("/soak/sse")
async def sse(request: Request) -> Response:
    return _stream(request, poll=False)


@app.get("/soak/sse-poll")
async def sse_poll(request: Request) -> Response:
    return _stream(request, poll=True)


def _answer(request: ChatRequest) -> AsyncIterator[str]:
    return soak_tokens(StreamParams.parse(request.message))


@app.websocket("/ws/soak")
async def ws_soak(websocket: WebSocket) -> None:
    await websocket_chat(websocket, _answer)


@app.get("/test/soak")
async def soak_report() -> dict[str, Any]:
    return report()


@app.post("/test/measure")
async def soak_measure() -> dict[str, Any]:
    return measure()
