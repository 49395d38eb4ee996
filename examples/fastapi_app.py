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
* ``POST /v1/chat/completions``: OpenAI's chat API, so the ``openai`` client can talk to it.
  ``"stream": true`` streams ``chat.completion.chunk`` events and ``data: [DONE]``; without
  it the whole answer comes back as one ``chat.completion``. A malformed body (bad JSON, no
  ``messages``) gets a 400 with an OpenAI error object; an eviction mid-stream an error chunk.
* ``GET /llm-guard/status``: the guard's status (loopback or bearer token).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Query, Request, WebSocket
from fastapi.responses import JSONResponse

from llm_guard_sdk import GuardConfig, guard_stream
from llm_guard_sdk.adapters.fastapi import (
    ChatRequest,
    GuardedSSEResponse,
    GuardSessionDep,
    install,
    sse_response,
    websocket_chat,
)
from llm_guard_sdk.adapters.openai_chunks import OpenAIChunks, openai_error
from llm_guard_sdk.adapters.openai_requests import OpenAIRequestError, parse_chat_completion
from llm_guard_sdk.adapters.wire import eviction_reason
from llm_guard_sdk.errors import BackendError
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

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> GuardedSSEResponse | JSONResponse:
        try:
            body = parse_chat_completion(await request.body())
            limit = parse_max_tokens(body.max_tokens)
        except OpenAIRequestError as exc:
            return JSONResponse(exc.document(), status_code=exc.status)
        except ValueError as exc:  # max_tokens past the demo's limit
            return JSONResponse(openai_error(str(exc), error_type="invalid_request_error",
                                             param="max_tokens"), status_code=400)
        framing = OpenAIChunks(body.model or model.name)
        source = model.stream(body.prompt(), limit)
        if body.stream:
            return sse_response(source, framing=framing, wait_first=True)
        return await complete(source, framing)

    return app


async def complete(source: AsyncIterator[str], framing: OpenAIChunks) -> JSONResponse:
    """A non-streaming chat completion: the whole answer, read through the guard."""
    parts: list[str] = []
    try:
        async with guard_stream(source) as stream:
            async for text in stream:
                parts.append(text)
    except BackendError as exc:
        return JSONResponse(framing.error_document(exc), status_code=exc.status,
                            headers=exc.headers())
    stopped = eviction_reason(stream)
    if stopped is not None:  # the guard cut it short: no partial answer as if complete
        return JSONResponse(openai_error(f"llm-guard stopped the request: {stopped.value}",
                                         error_type="server_error", code=stopped.value),
                            status_code=503)
    return JSONResponse(framing.completion("".join(parts)))


app = create_app()
