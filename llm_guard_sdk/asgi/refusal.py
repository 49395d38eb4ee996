"""What a middleware with invalid settings answers: it must stop the server from starting.

Starlette builds its middleware stack lazily, on the first ASGI call (normally the lifespan
startup). An exception raised there makes uvicorn's default ``lifespan="auto"`` decide that the
app "does not support lifespan", start anyway, and answer 500 to every request. So the
middleware keeps the :class:`~llm_guard_sdk.errors.ConfigError` instead of raising it, and this
app answers for it:

- lifespan: ``lifespan.startup.failed`` with the error's message, which every ASGI server treats
  as fatal (uvicorn logs the message and exits with a non-zero status);
- HTTP, where the server runs without lifespan (``--lifespan off``, Daphne): 500 with a JSON
  body naming the setting; WebSocket: the handshake is refused (close 1011).

The error is logged once, at ERROR, when the middleware is built.
"""

from __future__ import annotations

import logging
from typing import Any

from llm_guard_sdk.asgi.responses import send_json
from llm_guard_sdk.errors import ConfigError

logger = logging.getLogger("llm_guard_sdk")

WS_INTERNAL_ERROR = 1011


class ConfigRefusal:
    """An ASGI app refusing to start (or to serve) because of ``error``."""

    def __init__(self, error: ConfigError) -> None:
        self.error = error
        self.message = f"llm-guard configuration error: {error}"
        logger.error("%s; the server must not start", self.message)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Fail the lifespan startup; refuse HTTP and WebSocket connections."""
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await send_json(send, 500, {"error": self.message})
        elif kind == "websocket" and (await receive())["type"] == "websocket.connect":
            await send({"type": "websocket.close", "code": WS_INTERNAL_ERROR,
                        "reason": "llm-guard configuration error"})

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.failed", "message": self.message})
                return
            if message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
