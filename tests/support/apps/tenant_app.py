"""A raw ASGI app for the tenant end-to-end tests: sessions that hold real memory, and a ballast.

``uvicorn tests.support.apps.tenant_app:app``, settings from ``LLM_GUARD_*``, except the memory
limit: measured RSS at import plus ``LLM_GUARD_TEST_HEADROOM`` (a size) when that is set, so
the thresholds sit at known distances from what the process really uses.

* ``WS /hold?mib=N``: attaches an N MiB buffer (every page touched) to its session, answers
  ``held``, then idles until the client leaves or the guard closes it; closing frees the buffer.
* ``GET /ok``: ``200 ok`` when admitted.
* ``POST /test/ballast?mib=N`` / ``DELETE /test/ballast``: process memory no session owns
  (``/test`` is exempt from shedding).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs

import psutil

from llm_guard_sdk import GuardMiddleware
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.context import SCOPE_KEY
from llm_guard_sdk.quantities import parse_size

_MiB = 2**20
_ballast: list[bytearray] = []


def _touched(mib: int) -> bytearray:
    block = bytearray(mib * _MiB)  # over glibc's largest mmap threshold from 32 MiB: unmapped
    for i in range(0, len(block), 4096):  # on free, at once
        block[i] = 1
    return block


def _mib(scope: Any) -> int:
    return int(parse_qs(scope.get("query_string", b"").decode()).get("mib", ["0"])[0])


async def _respond(send: Any, body: bytes, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


async def _hold(scope: Any, receive: Any, send: Any) -> None:
    if (await receive())["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    session = scope.get(SCOPE_KEY)
    if session is not None:
        session.attach(_touched(_mib(scope)))  # only the session keeps it
    await send({"type": "websocket.send", "text": "held"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


async def _inner(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            kind = message["type"].split(".")[-1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    elif scope["type"] == "websocket":
        await _hold(scope, receive, send)
    elif scope["path"] == "/test/ballast":
        if scope["method"] == "DELETE":
            _ballast.clear()
        else:
            _ballast.append(_touched(_mib(scope)))
        await _respond(send, str(sum(map(len, _ballast)) // _MiB).encode())
    else:
        await _respond(send, b"ok")


def _config() -> GuardConfig:
    headroom = os.environ.get("LLM_GUARD_TEST_HEADROOM", "")
    if not headroom:
        return GuardConfig()
    rss = psutil.Process().memory_info().rss
    return GuardConfig(memory_limit=rss + parse_size(headroom))


app = GuardMiddleware(_inner, config=_config())
