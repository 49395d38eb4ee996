"""One endpoint per leak pattern (and a clean one), for the runtime sweeper's end-to-end test.

``uvicorn tests.leaks.apps.leaky_app:app`` with ``LLM_GUARD_LEAKS=1`` (the env switch attaches
the sweeper) and a short ``LLM_GUARD_LEAK_GRACE``. Every leaky endpoint keeps something of the
session alive the way real servers do by mistake.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from llm_guard_sdk import (
    Guard,
    GuardConfig,
    GuardMiddleware,
    Session,
    current_session,
    guard_stream,
)
from llm_guard_sdk.leaks import enable_leak_sweeper


class Context:
    """Per-conversation state: the prompt and a history that dwarfs it."""

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        self.history = [prompt * 2000]


CONTEXTS: dict[str, Context] = {}  # cache keyed by session id, never cleared on disconnect
CALLBACKS: list[Any] = []  # module-level callback list that closures are appended to
STREAMS: dict[str, AsyncIterator[str]] = {}  # generators kept by connection id
PENDING_CLOSE: list[Any] = []  # where Connection.__del__ parks itself "to close later"

guard = Guard(GuardConfig.from_env())
sweeper = enable_leak_sweeper(guard)  # already attached by LLM_GUARD_LEAKS=1: same object
sweeper.collect_interval = sweeper.revival_interval = 0.2


def session_of() -> Session:
    session = current_session()
    assert session is not None
    return session


async def leak_cache(request: Request) -> PlainTextResponse:
    session = session_of()
    CONTEXTS[session.id] = session.attach(Context("cache secret"))
    return PlainTextResponse("ok")


async def leak_closure(request: Request) -> PlainTextResponse:
    ctx = session_of().attach(Context("closure secret"))

    def on_done() -> str:
        return ctx.prompt

    CALLBACKS.append(on_done)
    return PlainTextResponse("ok")


async def tokens(ctx: Context) -> AsyncIterator[str]:
    for i in range(3):
        yield f"t{i} "
        await asyncio.sleep(0)


async def leak_stream(request: Request) -> StreamingResponse:
    ctx = session_of().attach(Context("stream secret"))
    source = tokens(ctx)
    STREAMS[f"conn-{request.query_params.get('conn', '0')}"] = source
    return StreamingResponse(guard_stream(source), media_type="text/plain")


async def watch_forever(session: Session) -> None:
    while True:  # a per-connection task nobody cancels on disconnect
        await asyncio.sleep(3600)
        session.summary()


async def leak_task(request: Request) -> PlainTextResponse:
    session = session_of()
    asyncio.get_running_loop().create_task(watch_forever(session))
    return PlainTextResponse("ok")


class Connection:
    """Holds itself in a cycle; its ``__del__`` parks it to "close later" (revives it)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.on_data = self.handle  # bound method: a reference cycle

    def handle(self) -> None:
        return None

    def __del__(self) -> None:
        PENDING_CLOSE.append(self)


async def leak_del_cycle(request: Request) -> PlainTextResponse:
    Connection(session_of().attach(Context("cycle secret")))
    return PlainTextResponse("ok")


async def clean(request: Request) -> StreamingResponse:
    session = session_of()
    session.attach(Context("clean"))
    session.attach({"history": ["clean"]})
    return StreamingResponse(guard_stream(tokens(Context("clean"))), media_type="text/plain")


app = GuardMiddleware(Starlette(routes=[
    Route("/leak/cache", leak_cache),
    Route("/leak/closure", leak_closure),
    Route("/leak/stream", leak_stream),
    Route("/leak/task", leak_task),
    Route("/leak/del-cycle", leak_del_cycle),
    Route("/clean", clean),
]), guard=guard)
