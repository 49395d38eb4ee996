"""An app for the metrics end-to-end tests: one guarded SSE route that says which worker served.

``uvicorn tests.metrics.apps.metrics_app:app [--workers 2]`` with ``LLM_GUARD_*`` (and
``PROMETHEUS_MULTIPROC_DIR``) set by the test. ``GET /stream?n=N&gap=S`` streams ``pid <pid>``
then N-1 chunks ``gap`` seconds apart.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI

from llm_guard_sdk import Guard, GuardConfig
from llm_guard_sdk.adapters.fastapi import GuardedSSEResponse, install, sse_response

guard = Guard(GuardConfig(sources=("process",), sample_interval=0.05))
app = FastAPI()
install(app, guard=guard)


async def chunks(n: int, gap: float) -> AsyncIterator[str]:
    yield f"pid {os.getpid()}"
    for i in range(1, n):
        await asyncio.sleep(gap)
        yield f"chunk {i}"


@app.get("/stream")
async def stream(n: int = 3, gap: float = 0.01) -> GuardedSSEResponse:
    return sse_response(chunks(n, gap), ping=None)
