"""Shared helpers for the adapter tests: SSE/WebSocket clients, polling, Channels testing."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from typing import Any

import httpx

from tests.server import status as status  # re-exported for the adapter tests
from tests.server import wait_for as wait_for

BASE_ENV = {
    "LLM_GUARD_SOURCES": "process",
    "LLM_GUARD_SAMPLE_INTERVAL": "0.1",
    "LLM_GUARD_DEMO_BACKEND": "simulated",
    "LLM_GUARD_EXEMPT_PATHS": "/test",
}

APPS = {
    "fastapi": "tests.apps.e2e_app:app",
    "litestar": "tests.adapters.apps.litestar_app:app",
    "channels": "tests.adapters.apps.channels_app:application",
}

EVICTED_REASON = "llm-guard: evicted under memory pressure"




async def stats(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    doc: dict[str, Any] = (await client.get(f"{base}/test/stats")).json()
    return doc




def parse_sse(lines: list[str]) -> list[tuple[str, str]]:
    """(event, data) pairs of an SSE body; comments (heartbeats) are skipped."""
    events: list[tuple[str, str]] = []
    event = "message"
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            events.append((event, line[6:]))
        elif line == "":
            event = "message"
    return events


async def read_sse(client: httpx.AsyncClient, url: str, *, drop_after: int | None = None
                   ) -> list[tuple[str, str]]:
    """Read SSE events as (event, data); stop abruptly after ``drop_after`` data events."""
    lines: list[str] = []
    async with client.stream("GET", url) as response:
        assert response.status_code == 200, response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            lines.append(line)
            if drop_after is not None and len(parse_sse(lines)) >= drop_after:
                return parse_sse(lines)  # leaving the block closes the connection mid-stream
    return parse_sse(lines)


async def chat_turn(ws: Any, prompt: str, max_tokens: int) -> list[dict[str, Any]]:
    """Send one prompt; collect frames up to and including ``done`` or ``error``."""
    await ws.send(json.dumps({"prompt": prompt, "max_tokens": max_tokens}))
    frames: list[dict[str, Any]] = []
    while True:
        frame = json.loads(await ws.recv())
        frames.append(frame)
        if frame["type"] in ("done", "error"):
            return frames


def channels_communicators() -> tuple[Any, Any]:
    """``channels.testing``'s HttpCommunicator and WebsocketCommunicator.

    ``channels.testing`` imports its Daphne live-server test case eagerly; the communicators do
    not need Daphne, so without it their modules are loaded from the package folder directly.
    """
    try:
        from channels.testing import HttpCommunicator, WebsocketCommunicator
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("daphne"):
            raise
        spec = importlib.util.find_spec("channels.testing")
        assert spec is not None and spec.submodule_search_locations is not None
        package = types.ModuleType("channels.testing")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["channels.testing"] = package
        from channels.testing.http import HttpCommunicator
        from channels.testing.websocket import WebsocketCommunicator
    return HttpCommunicator, WebsocketCommunicator
