"""What the dead-peer send watch costs one ASGI send, in isolation.

Run from the repository root: ``python -m benchmarks.send_watch``.

Three variants of a connection's ``send`` around a no-op server ``send``, alternating in one
process (``--rounds`` x ``--sends``), reported as min and median ns per send: the plain await,
the send watch as shipped in ``llm_guard_sdk.asgi`` (a counter, a flag and ``try``/``finally``),
and the rejected variant that also noted ``asyncio.current_task()`` per send (a Python function
on CPython 3.11). Minimum and median are robust to a shared, loaded machine; compare variants
within one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any


async def _server_send(message: Any) -> None:
    """The server's send: nothing to do, so only the wrapper is measured."""


class Plain:
    async def send(self, message: Any) -> None:
        await _server_send(message)


class Watched:
    """The shipped hot path of ``HttpConnection.send`` / ``WebSocketConnection.send``."""

    def __init__(self) -> None:
        self.sends = 0
        self.sending = False

    async def send(self, message: Any) -> None:
        self.sends += 1
        self.sending = True
        try:
            await _server_send(message)
        except asyncio.CancelledError:
            raise
        finally:
            self.sending = False


class WithTask:
    """The rejected draft: also notes the sending task on every send."""

    def __init__(self) -> None:
        self.sends = 0
        self.sending: asyncio.Task[Any] | None = None

    async def send(self, message: Any) -> None:
        self.sends += 1
        self.sending = asyncio.current_task()
        try:
            await _server_send(message)
        finally:
            self.sending = None


async def measure(rounds: int, sends: int) -> dict[str, list[float]]:
    variants: dict[str, Plain | Watched | WithTask] = {
        "plain": Plain(), "send watch": Watched(), "current_task per send": WithTask()}
    results: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, variant in variants.items():
            send = variant.send
            start = time.perf_counter_ns()
            for _ in range(sends):
                await send(None)
            results[name].append((time.perf_counter_ns() - start) / sends)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--sends", type=int, default=200_000)
    args = parser.parse_args()
    results = asyncio.run(measure(args.rounds, args.sends))
    print("| variant | min ns / send | median ns / send |\n|---|---:|---:|")
    for name, values in results.items():
        values.sort()
        print(f"| {name} | {values[0]:,.0f} | {values[len(values) // 2]:,.0f} |")


if __name__ == "__main__":
    main()
