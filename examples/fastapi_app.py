"""Demo: a FastAPI chat server guarded by llm-guard-sdk.

Run it with ``uvicorn examples.fastapi_app:app`` (or ``make demo``). The backend is a real vLLM
engine (the tiny local model) where vLLM is installed, the simulator otherwise; see
``llm_guard_sdk.demo``. Endpoints:

* ``GET /chat?prompt=...&max_tokens=N`` streams Server-Sent Events: one ``data:`` event per
  token, then ``event: done`` (``event: evicted`` first if the guard closed the stream,
  ``event: error`` if the model failed mid-stream). Errors before the first token are plain
  HTTP errors (400 prompt too long, 503 engine dead, ...).
* ``WS /ws/chat``: send ``{"prompt": "...", "max_tokens": N}``, receive
  ``{"type": "token", "text": ...}`` frames then ``{"type": "done"}``; repeat on one connection.
* ``GET /llm-guard/status``: the guard's status (loopback or bearer token).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Query, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, StreamingResponse

from llm_guard_sdk import (
    CloseReason,
    Guard,
    GuardConfig,
    GuardMiddleware,
    current_session,
    guard_stream,
)
from llm_guard_sdk.demo import Backend, parse_max_tokens, select_backend
from llm_guard_sdk.errors import BackendError
from llm_guard_sdk.sse import SSE_HEADERS, sse_event, sse_json
from llm_guard_sdk.stream import GuardedStream

logger = logging.getLogger("examples.fastapi_app")


def create_app(config: GuardConfig | None = None, backend: Backend | None = None) -> FastAPI:
    """Build the demo app; tests pass their own config and backend."""
    model = backend if backend is not None else select_backend()
    guard = Guard(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await model.start(guard)
        logger.info("llm-guard demo serving with the %s backend", model.name)
        try:
            yield
        finally:
            await model.close()

    app = FastAPI(title="llm-guard-sdk demo", lifespan=lifespan)
    app.add_middleware(GuardMiddleware, guard=guard)  # the one line
    app.state.backend = model
    app.state.guard = guard

    async def events(stream: GuardedStream[str], first: str | None) -> AsyncIterator[str]:
        try:
            if first is not None:
                yield sse_event(first)
            async for token in stream:
                yield sse_event(token)
        except BackendError as exc:  # the model failed mid-stream: tell the client, end
            yield sse_json({"error": exc.message, "status": exc.status}, event="error")
            return
        if stream.close_reason not in (None, CloseReason.COMPLETED):
            yield sse_json({"reason": stream.close_reason.value}, event="evicted")
        yield sse_event("{}", event="done")

    @app.get("/chat", response_model=None)
    async def chat(prompt: str = Query(..., max_length=20_000),
                   max_tokens: str | None = None) -> StreamingResponse | JSONResponse:
        try:
            limit = parse_max_tokens(max_tokens)
            session = current_session()
            if session is not None:
                session.attach({"prompt_chars": len(prompt)})
            stream = guard_stream(model.stream(prompt, limit), name=model.name)
            # Wait for the first token before sending headers, so a request the model rejects
            # gets a real HTTP status instead of a 200 with an error event.
            first = await anext(stream, None)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except BackendError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        return StreamingResponse(events(stream, first), media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    @app.websocket("/ws/chat")
    async def ws_chat(websocket: WebSocket) -> None:
        await websocket.accept()
        session = current_session()
        history: list[dict[str, str]] = session.attach([]) if session is not None else []
        try:
            while True:
                raw = await websocket.receive_text()
                try:
                    request = json.loads(raw)
                    prompt = str(request["prompt"])
                    max_tokens = parse_max_tokens(request.get("max_tokens"))
                except (ValueError, KeyError, TypeError) as exc:
                    await websocket.send_json({"type": "error", "error": f"bad request: {exc}"})
                    continue
                history.append({"role": "user", "content": prompt})
                reply: list[str] = []
                try:
                    async with guard_stream(model.stream(prompt, max_tokens),
                                            name=model.name) as stream:
                        async for token in stream:
                            reply.append(token)
                            await websocket.send_json({"type": "token", "text": token})
                except BackendError as exc:
                    await websocket.send_json({"type": "error", "error": exc.message,
                                               "status": exc.status})
                    continue
                history.append({"role": "assistant", "content": "".join(reply)})
                await websocket.send_json({"type": "done", "turns": len(history) // 2})
        except WebSocketDisconnect:
            return

    return app


app = create_app()
