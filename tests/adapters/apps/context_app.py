"""The FastAPI demo plus ``/ws/history``: a chat whose answer is the size of its history.

Each answer is one token, ``"<messages> <tokens>"``: the number of messages the handler was
given and their cost in the chat helpers' own estimate, so an end-to-end test can see that
every generation stayed within ``LLM_GUARD_MAX_HISTORY_TOKENS``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import WebSocket

from examples.fastapi_app import create_app
from llm_guard_sdk.adapters.fastapi import ChatRequest, websocket_chat
from llm_guard_sdk.testing.backends import select_backend
from llm_guard_sdk.trimming import TokenCounter

app = create_app(backend=select_backend())
_count = TokenCounter()


async def _history_size(request: ChatRequest) -> AsyncIterator[str]:
    yield f"{len(request.history)} {_count.total(request.history)}"


@app.websocket("/ws/history")
async def history(websocket: WebSocket) -> None:
    await websocket_chat(websocket, _history_size)
