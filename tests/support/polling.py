"""Waiting on conditions without depending on wall-clock speed, and the guard's status."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

#: Polls that yield to the event loop only (``sleep(0)``) before ``until`` starts sleeping.
SPINS = 1000


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:  # noqa: ASYNC109
    """Wait until ``predicate()`` is true: state inside this process (tasks, counters).

    The first polls only yield to the loop, so a condition that other tasks reach in a few
    steps is seen at once; after that it polls every 10 ms up to the generous ``timeout``.
    """
    deadline = time.monotonic() + timeout
    spins = 0
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        spins += 1
        await asyncio.sleep(0 if spins < SPINS else 0.01)


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float,  # noqa: ASYNC109
                   interval: float = 0.05) -> float:
    """Poll an async predicate (e.g. a status query); return how long it took."""
    start = time.monotonic()
    while True:
        if await predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


async def status(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    """GET the guard's status document."""
    response = await client.get(f"{base}/llm-guard/status")
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


async def wait_for_level(client: httpx.AsyncClient, base: str, level: str,
                         timeout: float) -> float:  # noqa: ASYNC109
    """Wait until the server's guard reports ``level``; return how long it took."""

    async def reached() -> bool:
        return bool((await status(client, base))["level"] == level)

    return await wait_for(reached, timeout)
