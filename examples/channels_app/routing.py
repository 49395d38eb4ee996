"""URL routing of the demo: the consumers get the backend as ``as_asgi`` init kwargs."""

from __future__ import annotations

from typing import Any

from channels.routing import URLRouter
from django.core.asgi import get_asgi_application
from django.urls import path, re_path

from examples.channels_app.consumers import ChatConsumer, SSEChatConsumer
from llm_guard_sdk.testing.backends import Backend


def http_router(backend: Backend, extra: list[Any] | None = None) -> URLRouter:
    """``/chat`` (SSE), any ``extra`` routes, then plain Django views for everything else."""
    return URLRouter([
        path("chat", SSEChatConsumer.as_asgi(backend=backend)),
        *(extra or []),
        re_path(r"", get_asgi_application()),
    ])


def websocket_router(backend: Backend) -> URLRouter:
    """``/ws/chat``."""
    return URLRouter([path("ws/chat", ChatConsumer.as_asgi(backend=backend))])
