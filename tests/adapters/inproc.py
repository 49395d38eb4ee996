"""In-process fixtures shared by the per-framework adapter tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from llm_guard_sdk import Guard, GuardConfig, Reading
from llm_guard_sdk.errors import BackendUnavailableError, InvalidRequestError


@dataclass
class FakeSource:
    used: int = 0
    limit: int = 1000
    name: str = "fake"

    def read(self) -> Reading:
        return Reading(self.name, self.used, self.limit)


def make_guard(**overrides: Any) -> Guard:
    """A guard on a fake memory source (never under pressure unless a test says so)."""
    guard = Guard(GuardConfig(sources=("process",), **overrides))
    guard.sources[:] = [FakeSource()]
    guard.sample_now()
    return guard


class Model:
    """A model stand-in that records every generator it made, to prove each was closed."""

    def __init__(self) -> None:
        self.generators: list[Any] = []
        self.started = 0
        self.closed = 0
        self.release = asyncio.Event()

    @property
    def open(self) -> int:
        return self.started - self.closed

    def stream(self, prompt: str, n: int = 3, *, delay: float = 0.0) -> AsyncIterator[str]:
        agen = self._tokens(prompt, n, delay)
        self.generators.append(agen)
        return agen

    async def _tokens(self, prompt: str, n: int, delay: float) -> AsyncIterator[str]:
        self.started += 1
        try:
            if prompt == "reject":
                raise InvalidRequestError("prompt too long for this model")
            if prompt == "wait":
                await self.release.wait()
            for i in range(n):
                if delay:
                    await asyncio.sleep(delay)
                if prompt == "die" and i == 2:
                    raise BackendUnavailableError("the engine is dead; retry later")
                yield f"t{i}"
        finally:
            self.closed += 1


def client_for(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5555))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=10)


def sse_events(body: str) -> list[tuple[str, str]]:
    """(event, data) pairs, comments as ("comment", text); accepts \\n and \\r\\n."""
    out: list[tuple[str, str]] = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        if not block:
            continue
        event, data = "message", []
        for line in block.split("\n"):
            if line.startswith(": "):
                out.append(("comment", line[2:]))
            elif line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            out.append((event, "\n".join(data)))
    return out


async def ws_frames(communicator: Any, *, until: tuple[str, ...] = ("done", "error")
                    ) -> list[dict[str, Any]]:
    """JSON frames from an asgiref/Channels communicator until one of ``until``."""
    frames: list[dict[str, Any]] = []
    while True:
        message = await communicator.receive_output(5)
        assert message["type"] == "websocket.send", message
        frames.append(json.loads(message["text"]))
        if frames[-1]["type"] in until:
            return frames


async def until(predicate: Any, timeout: float = 5.0) -> None:  # noqa: ASYNC109
    """Wait until ``predicate()`` is true (polling, for state inside the app)."""
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"condition not met within {timeout}s")
