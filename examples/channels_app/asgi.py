"""ASGI entry point: ``uvicorn examples.channels_app.asgi:application``.

Same endpoints and protocol as ``examples/fastapi_app.py``: SSE ``GET /chat``, WebSocket
``/ws/chat``, ``GET /llm-guard/status``; plus a plain Django view at ``/hello``. The model is
started by a ``lifespan`` app, because Channels itself does not handle the lifespan protocol.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.channels_app.settings")
django.setup()  # before anything imports models or URL configuration

from channels.routing import ProtocolTypeRouter  # noqa: E402

from examples.channels_app.routing import http_router, websocket_router  # noqa: E402
from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware  # noqa: E402
from llm_guard_sdk.adapters.channels import guard_application  # noqa: E402
from llm_guard_sdk.testing.backends import Backend, select_backend  # noqa: E402

logger = logging.getLogger("examples.channels_app")


class Lifespan:
    """Starts the model with the guard at server startup and closes it at shutdown."""

    def __init__(self, backend: Backend, guard: Guard) -> None:
        self.backend = backend
        self.guard = guard

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.backend.start(self.guard)
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                    return
                logger.info("llm-guard demo serving with the %s backend", self.backend.name)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.backend.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


def create_application(config: GuardConfig | None = None, backend: Backend | None = None, *,
                       extra_http: list[Any] | None = None) -> GuardMiddleware:
    """Build the guarded application; tests pass their own config, backend and routes."""
    model = backend if backend is not None else select_backend()
    guard = Guard(config)
    router = ProtocolTypeRouter({
        "http": http_router(model, extra_http),
        "websocket": websocket_router(model),
        "lifespan": Lifespan(model, guard),
    })
    application = guard_application(router, guard=guard)  # the one line
    return application


application = create_application()
