"""The soak app on Django Channels (routes as in :mod:`tests.proof.apps.soak_fastapi`).

A Channels ``AsyncHttpConsumer`` cannot see ``http.disconnect`` while ``handle()`` runs, so
there is no polling variant: ``/soak/sse-poll`` is the plain stream (the guard ends it).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterable
from typing import Any
from urllib.parse import parse_qsl

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.channels_app.settings")
django.setup()

from channels.generic.http import AsyncHttpConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from llm_guard_sdk.adapters.channels import (  # noqa: E402
    ChatRequest,
    GuardedHttpConsumer,
    GuardedWebsocketConsumer,
    guard_application,
)
from tests.proof.apps.soak_common import (  # noqa: E402
    StreamParams,
    measure,
    report,
    soak_tokens,
)


class SSE(GuardedHttpConsumer):
    async def handle(self, body: bytes) -> None:
        query = dict(parse_qsl(self.scope["query_string"].decode("latin-1")))
        try:
            params = StreamParams.parse(query)
        except ValueError as exc:
            await self.send_json(400, {"error": str(exc)})
            return
        await self.send_sse(soak_tokens(params), ping=None)


class Chat(GuardedWebsocketConsumer):
    async def generate(self, request: ChatRequest) -> AsyncIterable[str]:
        return soak_tokens(StreamParams.parse(request.message))


class Hooks(AsyncHttpConsumer):  # type: ignore[misc]
    async def handle(self, body: bytes) -> None:
        document = measure() if self.scope["method"] == "POST" else report()
        await self.send_response(200, json.dumps(document).encode(),
                                 headers=[(b"content-type", b"application/json")])


async def _lifespan(scope: Any, receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        await send({"type": message["type"] + ".complete"})
        if message["type"] == "lifespan.shutdown":
            return


application = guard_application(ProtocolTypeRouter({
    "http": URLRouter([
        path("soak/sse", SSE.as_asgi()),
        path("soak/sse-poll", SSE.as_asgi()),
        path("test/soak", Hooks.as_asgi()),
        path("test/measure", Hooks.as_asgi()),
    ]),
    "websocket": URLRouter([path("ws/soak", Chat.as_asgi())]),
    "lifespan": _lifespan,
}))
