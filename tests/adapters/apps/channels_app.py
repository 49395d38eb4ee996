"""The Channels demo plus test-only routes under the exempt ``/test`` prefix."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from channels.generic.http import AsyncHttpConsumer
from django.urls import path

from examples.channels_app.asgi import create_application
from llm_guard_sdk.testing.backends import select_backend
from tests.adapters.apps import ballast

backend = select_backend()


class Hooks(AsyncHttpConsumer):  # type: ignore[misc]
    async def handle(self, body: bytes) -> None:
        method, route = self.scope["method"], self.scope["path"]
        document: Any
        if route == "/test/stats":
            document = ballast.stats(backend)
        elif method == "POST":
            query = parse_qs(self.scope["query_string"].decode())
            document = ballast.hold(int(query["mib"][0]))
        else:
            document = ballast.drop()
        await self.send_response(200, json.dumps(document).encode(),
                                 headers=[(b"content-type", b"application/json")])


application = create_application(backend=backend, extra_http=[
    path("test/stats", Hooks.as_asgi()),
    path("test/ballast", Hooks.as_asgi()),
])
