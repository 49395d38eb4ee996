"""Demo: a FastAPI chat server guarded by llm-guard-sdk.

Run it with ``uvicorn examples.fastapi_app:app`` (or ``make demo``). Endpoints:

* ``GET /chat?prompt=...&max_tokens=N`` streams Server-Sent Events: one ``data:`` event per
  token, then ``event: done`` (``event: evicted`` first if the guard closed the stream).
* ``WS /ws/chat``: send ``{"prompt": "...", "max_tokens": N}``, receive
  ``{"type": "token", "text": ...}`` frames then ``{"type": "done"}``; repeat on one connection.
* ``GET /llm-guard/status``: the guard's status (loopback or bearer token).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import FastAPI, Query, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse, StreamingResponse

from llm_guard_sdk import CloseReason, GuardConfig, GuardMiddleware, current_session, guard_stream
from llm_guard_sdk.demo import Backend, parse_max_tokens, select_backend
from llm_guard_sdk.sse import SSE_HEADERS, sse_event, sse_json


def create_app(config: GuardConfig | None = None, backend: Backend | None = None) -> FastAPI:
    """Build the demo app; tests pass their own config and backend."""
    model = backend if backend is not None else select_backend()
    app = FastAPI(title="llm-guard-sdk demo")
    app.add_middleware(GuardMiddleware, config=config)  # the one line
    app.state.backend = model

    async def events(prompt: str, max_tokens: int) -> AsyncIterator[str]:
        session = current_session()
        if session is not None:
            session.attach({"prompt_chars": len(prompt)})
        stream = guard_stream(model.stream(prompt, max_tokens), name=model.name)
        async for token in stream:
            yield sse_event(token)
        if stream.close_reason not in (None, CloseReason.COMPLETED):
            yield sse_json({"reason": stream.close_reason.value}, event="evicted")
        yield sse_event("{}", event="done")

    @app.get("/chat", response_model=None)
    async def chat(prompt: str = Query(..., max_length=20_000),
                   max_tokens: str | None = None) -> StreamingResponse | JSONResponse:
        try:
            limit = parse_max_tokens(max_tokens)
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return StreamingResponse(events(prompt, limit), media_type="text/event-stream",
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
                async with guard_stream(model.stream(prompt, max_tokens), name=model.name) as s:
                    async for token in s:
                        reply.append(token)
                        await websocket.send_json({"type": "token", "text": token})
                history.append({"role": "assistant", "content": "".join(reply)})
                await websocket.send_json({"type": "done", "turns": len(history) // 2})
        except WebSocketDisconnect:
            return

    return app


app = create_app()
