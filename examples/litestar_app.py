"""Demo: a Litestar chat server guarded by llm-guard-sdk (same protocol as the FastAPI demo).

Run it with ``uvicorn examples.litestar_app:app``. The backend is a real vLLM engine (the tiny
local model) where vLLM is installed, the simulator otherwise; see
``llm_guard_sdk.testing.backends``.

* ``GET /chat?prompt=...&max_tokens=N``: Server-Sent Events, one ``data:`` event per token,
  then ``event: done`` (``event: evicted`` first if the guard closed the stream, ``event:
  error`` if the model failed mid-stream). Errors before the first token are plain HTTP errors.
* ``WS /ws/chat``: send ``{"prompt": "...", "max_tokens": N}``, receive
  ``{"type": "token", "text": ...}`` frames then ``{"type": "done", "turns": n}``; repeat.
* ``GET /llm-guard/status``: the guard's status (loopback or bearer token).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any

from litestar import Litestar, Response, WebSocket, get, websocket
from litestar.params import FromQuery, QueryParameter
from litestar.types import ControllerRouterHandler

from llm_guard_sdk import GuardConfig
from llm_guard_sdk.adapters.litestar import (
    ChatRequest,
    GuardSessionDep,
    LLMGuardPlugin,
    sse_response,
    websocket_chat,
)
from llm_guard_sdk.testing.backends import Backend, parse_max_tokens, select_backend

logger = logging.getLogger("examples.litestar_app")


def create_app(config: GuardConfig | None = None, backend: Backend | None = None, *,
               route_handlers: Sequence[ControllerRouterHandler] = ()) -> Litestar:
    """Build the demo app; tests pass their own config, backend and extra routes."""
    model = backend if backend is not None else select_backend()
    plugin = LLMGuardPlugin(config)

    async def start_model() -> None:
        await model.start(plugin.guard)
        logger.info("llm-guard demo serving with the %s backend", model.name)

    @get("/chat")
    async def chat(session: GuardSessionDep,
                   prompt: Annotated[str, QueryParameter(max_length=20_000)],
                   max_tokens: FromQuery[str | None] = None) -> Response[Any]:
        try:
            limit = parse_max_tokens(max_tokens)
        except ValueError as exc:
            return Response({"error": str(exc)}, status_code=400)
        session.attach({"prompt_chars": len(prompt)})
        # wait_first: a request the model rejects gets a real HTTP status, not a 200 + error.
        return sse_response(model.stream(prompt, limit), wait_first=True)

    def answer(request: ChatRequest) -> AsyncIterator[str]:
        return model.stream(request.prompt, parse_max_tokens(request.message.get("max_tokens")))

    @websocket("/ws/chat")
    async def ws_chat(socket: WebSocket[Any, Any, Any]) -> None:
        await websocket_chat(socket, answer)

    app = Litestar([chat, ws_chat, *route_handlers],
                   plugins=[plugin],  # the one line
                   on_startup=[start_model], on_shutdown=[model.close])
    app.state.backend = model
    return app


app = create_app()
