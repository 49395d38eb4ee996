"""Demo: a FastAPI chat server guarded by llm-guard-sdk.

Run it with ``uvicorn examples.fastapi_app:app`` (or ``make demo``). The backend is a real vLLM
engine (the tiny local model) where vLLM is installed, the simulator otherwise; see
``llm_guard_sdk.testing.backends``. Endpoints:

* ``GET /chat?prompt=...&max_tokens=N`` streams Server-Sent Events: one ``data:`` event per
  token, then ``event: done`` (``event: evicted`` first if the guard closed the stream,
  ``event: error`` if the model failed mid-stream). Errors before the first token are plain
  HTTP errors (400 prompt too long, 503 engine dead, ...).
* ``WS /ws/chat``: send ``{"prompt": "...", "max_tokens": N}``, receive
  ``{"type": "token", "text": ...}`` frames then ``{"type": "done"}``; repeat on one connection.
* ``GET /llm-guard/status``: the guard's status (loopback or bearer token).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Query, WebSocket
from fastapi.responses import JSONResponse

from llm_guard_sdk import GuardConfig
from llm_guard_sdk.adapters.fastapi import (
    ChatRequest,
    GuardedSSEResponse,
    GuardSessionDep,
    install,
    sse_response,
    websocket_chat,
)
from llm_guard_sdk.testing.backends import Backend, parse_max_tokens, select_backend

logger = logging.getLogger("examples.fastapi_app")


def create_app(config: GuardConfig | None = None, backend: Backend | None = None) -> FastAPI:
    """Build the demo app; tests pass their own config and backend."""
    model = backend if backend is not None else select_backend()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await model.start(guard)
        logger.info("llm-guard demo serving with the %s backend", model.name)
        try:
            yield
        finally:
            await model.close()

    app = FastAPI(title="llm-guard-sdk demo", lifespan=lifespan)
    guard = install(app, config)  # the one line
    app.state.backend = model
    app.state.guard = guard

    @app.get("/chat", response_model=None)
    async def chat(session: GuardSessionDep, prompt: str = Query(..., max_length=20_000),
                   max_tokens: str | None = None) -> GuardedSSEResponse | JSONResponse:
        try:
            limit = parse_max_tokens(max_tokens)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        session.attach({"prompt_chars": len(prompt)})
        # wait_first: a request the model rejects gets a real HTTP status, not a 200 + error.
        return sse_response(model.stream(prompt, limit), wait_first=True)

    def answer(request: ChatRequest) -> AsyncIterator[str]:
        return model.stream(request.prompt, parse_max_tokens(request.message.get("max_tokens")))

    @app.websocket("/ws/chat")
    async def ws_chat(websocket: WebSocket) -> None:
        await websocket_chat(websocket, answer)

    return app


app = create_app()
