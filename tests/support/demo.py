"""The demo apps the end-to-end tests serve, their environment and their chat protocol."""

from __future__ import annotations

import json
from typing import Any

import httpx

#: The simulated backend, sampled fast, with the test-only routes exempt from shedding.
BASE_ENV = {
    "LLM_GUARD_SOURCES": "process",
    "LLM_GUARD_SAMPLE_INTERVAL": "0.1",
    "LLM_GUARD_DEMO_BACKEND": "simulated",
    "LLM_GUARD_EXEMPT_PATHS": "/test",
}

#: The same demos on a real vLLM engine (the tiny model).
VLLM_ENV = {
    "LLM_GUARD_DEMO_BACKEND": "vllm",
    "LLM_GUARD_SOURCES": "process",
    "LLM_GUARD_SAMPLE_INTERVAL": "0.05",
    "LLM_GUARD_EXEMPT_PATHS": "/test",
}

#: One demo app per framework, all speaking the same protocol.
APPS = {
    "fastapi": "tests.support.apps.e2e_app:app",
    "litestar": "tests.adapters.apps.litestar_app:app",
    "channels": "tests.adapters.apps.channels_app:application",
}

EVICTED_REASON = "llm-guard: evicted under memory pressure"


async def stats(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    """The demo backend's generator counters (``GET /test/stats``)."""
    doc: dict[str, Any] = (await client.get(f"{base}/test/stats")).json()
    return doc


async def chat_turn(ws: Any, prompt: str, max_tokens: int) -> list[dict[str, Any]]:
    """Send one prompt on a chat WebSocket; collect frames up to ``done`` or ``error``."""
    await ws.send(json.dumps({"prompt": prompt, "max_tokens": max_tokens}))
    frames: list[dict[str, Any]] = []
    while True:
        frame = json.loads(await ws.recv())
        frames.append(frame)
        if frame["type"] in ("done", "error"):
            return frames
