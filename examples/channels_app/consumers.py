"""The demo's consumers: SSE ``/chat`` over ``AsyncHttpConsumer``, WebSocket ``/ws/chat``."""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any
from urllib.parse import parse_qs

from llm_guard_sdk import current_session
from llm_guard_sdk.adapters.channels import (
    ChatRequest,
    GuardedHttpConsumer,
    GuardedWebsocketConsumer,
)
from llm_guard_sdk.testing.backends import Backend, parse_max_tokens

MAX_PROMPT_CHARS = 20_000


class SSEChatConsumer(GuardedHttpConsumer):
    """``GET /chat?prompt=...&max_tokens=N``: one ``data:`` event per token, then ``done``."""

    def __init__(self, *, backend: Backend, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend = backend

    async def handle(self, body: bytes) -> None:
        if self.scope["method"] != "GET":
            await self.send_response(405, b"", headers=[(b"allow", b"GET")])
            return
        query = parse_qs(self.scope["query_string"].decode("latin-1"))
        prompt = query.get("prompt", [None])[0]
        if prompt is None or len(prompt) > MAX_PROMPT_CHARS:
            await self.send_json(400, {"error": "prompt is required, at most "
                                                f"{MAX_PROMPT_CHARS} characters"})
            return
        try:
            limit = parse_max_tokens(query.get("max_tokens", [None])[0])
        except ValueError as exc:
            await self.send_json(400, {"error": str(exc)})
            return
        session = current_session()  # consumers run in the middleware's context
        if session is not None:
            session.attach({"prompt_chars": len(prompt)})
        # wait_first: a request the model rejects gets a real HTTP status, not a 200 + error.
        await self.send_sse(self.backend.stream(prompt, limit), wait_first=True)


class ChatConsumer(GuardedWebsocketConsumer):
    """``WS /ws/chat``: ``{"prompt", "max_tokens"}`` in, token frames and ``done`` out."""

    def __init__(self, *, backend: Backend, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.backend = backend

    async def generate(self, request: ChatRequest) -> AsyncIterable[str]:
        max_tokens = parse_max_tokens(request.message.get("max_tokens"))
        return self.backend.stream(request.prompt, max_tokens)
