"""The demo app with the leak pattern the guard fights: every conversation holds megabytes.

``uvicorn tests.proof.oom_app:app``. Each ``GET /oom/chat?prompt=...&max_tokens=N`` builds a
conversation context of ``OOM_WORKLOAD_CONTEXT_MIB`` MiB of real, touched bytes (1 MiB blocks,
like a long chat history held in memory) and streams the model's answer slowly (a pause of
``OOM_WORKLOAD_TOKEN_DELAY`` seconds after each piece, and at least ``max_tokens`` times that in
all, see :func:`paced`), so many conversations are open at once
and memory grows with their number. The model is the demo's (``LLM_GUARD_DEMO_BACKEND``:
``simulated`` or ``vllm``, the tiny model in process).

``OOM_WORKLOAD_GUARD``:

* ``on`` (default): the demo app itself (``examples.fastapi_app.create_app``, guard installed,
  settings from ``LLM_GUARD_*``); the context is ``session.attach``\\ ed, so it lives exactly as
  long as the session and an eviction frees it. The answer streams with the demo's SSE events
  (``event: evicted`` then ``done`` when the guard stopped it).
* ``off``: the same route and model with no guard at all (no middleware, no sampler); the
  context lives until the stream ends, as in an unprotected server. vLLM is streamed with
  ``stream_vllm`` outside any guard (it still aborts a request whose client went away).

``OOM_WORKLOAD_TIMELINE`` (guarded): a file the guard's ticks are appended to, one line each
(monotonic time, sampled pressure, level, open streams); ``oom_load.run`` sets it and returns
them as ``RunResult.timeline``.

``GET /oom/info`` answers ``{"pid", "guarded", "backend"}``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse, StreamingResponse

from examples.fastapi_app import create_app
from llm_guard_sdk.adapters.fastapi import GuardedSSEResponse, GuardSessionDep, sse_response
from llm_guard_sdk.testing.backends import Backend, select_backend

MIB = 2**20
GUARDED = os.environ.get("OOM_WORKLOAD_GUARD", "on").strip().lower() not in ("off", "0", "no")
CONTEXT_MIB = int(os.environ.get("OOM_WORKLOAD_CONTEXT_MIB", "") or "4")
TOKEN_DELAY = float(os.environ.get("OOM_WORKLOAD_TOKEN_DELAY", "") or "0.2")
BACKEND = os.environ.get("LLM_GUARD_DEMO_BACKEND", "simulated").strip().lower()
TIMELINE = os.environ.get("OOM_WORKLOAD_TIMELINE", "")


def conversation_context(mib: int, seed: int) -> list[bytes]:
    """``mib`` blocks of 1 MiB, every page written, so the kernel really charges them."""
    return [bytes([(seed + i) % 251 + 1]) * MIB for i in range(mib)]


async def paced(source: AsyncIterator[str], delay: float, tokens: int) -> AsyncIterator[str]:
    """The model's text with a pause after each piece, lasting at least ``tokens * delay`` s.

    A slow stream keeps its context held. vLLM merges the deltas of a request whose consumer
    lags into one output, so pausing per piece alone would end its streams early (fewer,
    larger pieces); the stream is therefore held, pausing, until the time ``tokens`` pieces
    would have taken.
    """
    loop = asyncio.get_running_loop()
    until = loop.time() + tokens * delay
    async with aclosing(source) as pieces:  # type: ignore[type-var]
        async for piece in pieces:
            yield piece
            await asyncio.sleep(delay)
    await asyncio.sleep(max(0.0, until - loop.time()))  # cancelled at once by an eviction


class UnguardedVLLM:
    """The tiny model in process, streamed with no guard (the demo's engine settings)."""

    name = "vllm"

    def __init__(self) -> None:
        self.engine: Any = None
        self.params: Any = None

    async def start(self) -> None:
        from vllm import SamplingParams

        from llm_guard_sdk.testing.engine import make_async_llm
        from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

        self.engine = make_async_llm(ensure_tiny_model(), kv_cache_memory_bytes=64 * MIB,
                                     max_model_len=512)
        self.params = SamplingParams(ignore_eos=True)

    def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        from llm_guard_sdk.engines.vllm import stream_vllm

        params = self.params.clone()
        params.max_tokens = max_tokens
        stream: AsyncIterator[str] = stream_vllm(self.engine, prompt, params)
        return stream

    async def close(self) -> None:
        if self.engine is not None:
            from llm_guard_sdk.testing.engine import shutdown_async_llm

            shutdown_async_llm(self.engine)
            self.engine = None


def timeline_writer(path: str) -> Any:
    """A tick hook appending ``monotonic pressure level streams`` per sample to ``path``.

    Lets the benchmark line the guard's view (what it sampled, the level it acted on, the
    streams open) up with the cgroup's charge sampled from outside (same monotonic clock).
    """
    out = open(path, "a", buffering=1)  # noqa: SIM115 -- line-buffered: an OOM kill keeps it

    def record(guard: Any) -> None:
        out.write(f"{time.monotonic():.4f} {guard.sampler.pressure:.4f} "
                  f"{int(guard.policy.level)} {guard.registry.streams_open}\n")

    return record


def guarded_app() -> FastAPI:
    """The demo app plus the memory-hungry chat route."""
    model: Backend = select_backend()
    demo = create_app(backend=model)
    counter = iter(range(1 << 62))
    if TIMELINE:
        demo.state.guard.add_tick_hook(timeline_writer(TIMELINE))

    @demo.get("/oom/chat", response_model=None)
    async def oom_chat(session: GuardSessionDep, prompt: str = Query(..., max_length=2000),
                       max_tokens: int = Query(40, ge=1, le=400)) -> GuardedSSEResponse:
        session.attach(conversation_context(CONTEXT_MIB, next(counter)))
        return sse_response(paced(model.stream(prompt, max_tokens), TOKEN_DELAY, max_tokens),
                            wait_first=True)

    return demo


def unguarded_app() -> FastAPI:
    """The same route and model, nothing watching memory."""
    model: Any = UnguardedVLLM() if BACKEND == "vllm" else select_backend()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await (model.start() if isinstance(model, UnguardedVLLM) else model.start(None))
        try:
            yield
        finally:
            await model.close()

    bare = FastAPI(title="llm-guard-sdk OOM workload, unguarded", lifespan=lifespan)
    counter = iter(range(1 << 62))

    async def events(prompt: str, max_tokens: int) -> AsyncIterator[str]:
        context = conversation_context(CONTEXT_MIB, next(counter))  # held until the end
        async for token in paced(model.stream(prompt, max_tokens), TOKEN_DELAY, max_tokens):
            yield f"data: {token}\n\n"
        yield f"event: done\ndata: {len(context)}\n\n"

    @bare.get("/oom/chat", response_model=None)
    async def oom_chat(prompt: str = Query(..., max_length=2000),
                       max_tokens: int = Query(40, ge=1, le=400)) -> StreamingResponse:
        return StreamingResponse(events(prompt, max_tokens), media_type="text/event-stream")

    return bare


app = guarded_app() if GUARDED else unguarded_app()


@app.get("/oom/info")
async def info() -> JSONResponse:
    return JSONResponse({"pid": os.getpid(), "guarded": GUARDED, "backend": BACKEND})
