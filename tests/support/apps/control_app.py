"""An app for the adaptive-control end-to-end tests: adaptive timeouts and a circuit breaker.

``uvicorn tests.support.apps.control_app:app``. ``GET /stream`` streams SSE chunks (optionally
stalling after the first); ``GET /backend`` calls a fake backend behind the ``fake`` breaker,
which fails while ``POST /test/backend?fail=1`` says so; the breakers run on a clock that
``POST /test/advance?seconds=N`` moves forward. ``GET /test/stats`` counts generators and
backend calls, so tests assert on counts, never on speed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from llm_guard_sdk import Guard, GuardConfig
from llm_guard_sdk.actions import AdaptiveTimeouts, AdaptiveTimeoutSettings
from llm_guard_sdk.adapters.fastapi import GuardedSSEResponse, install, sse_response
from llm_guard_sdk.breakers import BreakerOpenError, Breakers, BreakerSettings
from llm_guard_sdk.errors import BackendError, BackendUnavailableError

ADAPTIVE = AdaptiveTimeoutSettings(enabled=True, min_timeout=1.0, max_timeout=2.0, jitter=0.0,
                                   min_samples=20, window=600.0)
BREAKER = BreakerSettings(failures=3, window=600.0, open_for=30.0, probes=1)
skew = {"seconds": 0.0}


def clock() -> float:
    """The breakers' clock: monotonic, plus what the test advanced it by."""
    return time.monotonic() + skew["seconds"]


guard = Guard(GuardConfig(sources=("process",), sample_interval=0.05, exempt_paths=("/test",)),
              extensions=[AdaptiveTimeouts(ADAPTIVE), Breakers(BREAKER, clock=clock)])
app = FastAPI()
install(app, guard=guard)
breaker = Breakers.of(guard).get("fake")
counts = {"started": 0, "closed": 0, "backend_calls": 0}
backend = {"fail": False}


async def chunks(n: int, gap: float, stall: bool) -> AsyncIterator[str]:
    counts["started"] += 1
    try:
        for i in range(n):
            yield f"chunk {i}"
            if stall:
                await asyncio.Event().wait()  # the model hangs: only a timeout ends this
            await asyncio.sleep(gap)
    finally:
        counts["closed"] += 1


@app.get("/stream")
async def stream(n: int = 10, gap: float = 0.02, stall: bool = False) -> GuardedSSEResponse:
    return sse_response(chunks(n, gap, stall), ping=None)


@app.get("/backend")
async def call_backend() -> dict[str, Any]:
    async with breaker.guarded():
        counts["backend_calls"] += 1
        if backend["fail"]:
            raise BackendUnavailableError("fake backend is down")
    return {"ok": True}


@app.exception_handler(BreakerOpenError)
async def breaker_open(request: Request, exc: BreakerOpenError) -> JSONResponse:
    return JSONResponse({"error": exc.message, "retry_after": exc.retry_after}, status_code=503,
                        headers=exc.headers())


@app.exception_handler(BackendError)
async def backend_error(request: Request, exc: BackendError) -> JSONResponse:
    return JSONResponse({"error": exc.message}, status_code=exc.status)


@app.post("/test/backend")
async def set_backend(fail: bool) -> dict[str, bool]:
    backend["fail"] = fail
    return backend


@app.post("/test/advance")
async def advance(seconds: float) -> dict[str, float]:
    skew["seconds"] += seconds
    return skew


@app.get("/test/stats")
async def stats() -> dict[str, int]:
    return counts
