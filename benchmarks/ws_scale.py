"""Scale: 10,000 concurrent idle WebSocket sessions — bytes per session and one tick's cost.

Run from the repository root::

    python -m benchmarks.ws_scale --json /tmp/bench/ws_scale.json     # 10,000 sessions
    python -m benchmarks.ws_scale --quick                             # 500 sessions

In process, no sockets: a minimal WebSocket ASGI app (accept, then wait in ``receive()`` until
the client leaves, as a chat connection between prompts does) is driven by ``--sessions``
concurrent connections, each a task with an in-memory ``receive``/``send``. Done twice, in
alternating rounds: with the bare app, with the least a watching middleware costs
(:class:`Wrapping`: its frame, a wrapped ``receive``, two closures) and with the app in
``GuardMiddleware`` (real
:class:`~llm_guard_sdk.Session` objects, the registry's idle LRU, the connection and the
app's direct read of the server (no receive pump while the app waits in ``receive()``):
everything the guard keeps for a connection).

* **Bookkeeping per session**: ``tracemalloc``'s traced bytes once every connection is accepted
  and idle, minus the same before opening them (after ``gc.collect()``), divided by the
  sessions; guarded minus bare is what the guard adds in all, guarded minus wrapping its own
  bookkeeping (what it keeps beyond being a middleware at all). The bytes allocated from
  files of the ``llm_guard_sdk`` package (tracemalloc attributes an allocation to the
  innermost Python frame) are reported too.
* **One policy tick** at that size: ``Guard.tick()`` (sample the sources, run the level's
  actions) timed ``--ticks`` times, ``--tick-gap`` apart, with every session open, at the
  normal level and at the warn level (idle timeouts; the first warn tick also takes the warn
  snapshot), median and max. Tracing is off while timing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.harness import Log
from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware
from tests.support.asgi import ws_scope
from tests.support.sources import FakeSource

Message = dict[str, Any]
_PACKAGE = str(Path(__file__).resolve().parents[1] / "llm_guard_sdk")


async def chat_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Accept, then wait for frames until the client leaves (idle between prompts)."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    await send({"type": "websocket.accept"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


class Wrapping:
    """The least any middleware that watches a connection costs: the floor under the guard.

    A pure ASGI middleware that wraps ``receive`` and ``send`` (as it must to see messages):
    its own frame for the connection's life, the wrapped ``receive`` the app awaits, two
    closures. What the guard adds beyond this is its bookkeeping (sessions, registry, ...).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def wrapped_receive() -> Message:
            message: Message = await receive()
            return message

        async def wrapped_send(message: Message) -> None:
            await send(message)

        await self.app(scope, wrapped_receive, wrapped_send)


class Client:
    """One in-memory WebSocket client: connects, stays silent until :meth:`leave`."""

    def __init__(self, accepted: list[int], all_in: asyncio.Event, count: int) -> None:
        self._accepted, self._all_in, self._count = accepted, all_in, count
        self._connected = False
        self._gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def receive(self) -> Message:
        if not self._connected:
            self._connected = True
            return {"type": "websocket.connect"}
        await self._gone
        return {"type": "websocket.disconnect", "code": 1000}

    async def send(self, message: Message) -> None:
        if message["type"] == "websocket.accept":
            self._accepted[0] += 1
            if self._accepted[0] == self._count:
                self._all_in.set()

    def leave(self) -> None:
        if not self._gone.done():
            self._gone.set_result(None)


def _guard(source: FakeSource) -> Guard:
    # A day's idle timeout: the sessions stay open for the whole measurement. The process
    # source (RSS) has no limit of its own here; the fake one sets the level.
    config = GuardConfig.defaults(sources=("process",), idle_timeout=86_400,
                                  max_sessions=1_000_000)
    return Guard(config, sources=[source])


async def open_sessions(app: Any, count: int) -> tuple[list[Client], list[asyncio.Task[None]]]:
    """``count`` connections through ``app``, returned once every one was accepted."""
    accepted, all_in = [0], asyncio.Event()
    clients = [Client(accepted, all_in, count) for _ in range(count)]
    tasks = [asyncio.create_task(app(ws_scope("/ws/chat"), c.receive, c.send)) for c in clients]
    await all_in.wait()
    for _ in range(3):  # let every read reach its wait
        await asyncio.sleep(0)
    return clients, tasks


async def close_sessions(clients: list[Client], tasks: list[asyncio.Task[None]]) -> None:
    for client in clients:
        client.leave()
    await asyncio.gather(*tasks)


def _traced() -> tuple[int, int]:
    """Traced bytes in all, and of allocations made in the guard's own files."""
    snapshot = tracemalloc.take_snapshot()
    ours = sum(stat.size for stat in snapshot.statistics("filename")
               if stat.traceback[0].filename.startswith(_PACKAGE))
    return sum(stat.size for stat in snapshot.statistics("filename")), ours


async def measure_memory(app: Any, count: int) -> dict[str, float]:
    gc.collect()
    tracemalloc.start(1)
    try:
        total0, ours0 = _traced()
        clients, tasks = await open_sessions(app, count)
        gc.collect()
        total1, ours1 = _traced()
    finally:
        tracemalloc.stop()
    await close_sessions(clients, tasks)
    return {"bytes_per_session": (total1 - total0) / count,
            "guard_files_bytes_per_session": (ours1 - ours0) / count}


async def time_ticks(guard: Guard, source: FakeSource, used: int, ticks: int, gap: float
                     ) -> list[float]:
    """``ticks`` calls of ``guard.tick()`` at the level ``used`` bytes of 1000 give, in ms.

    ``gap`` seconds apart (not timed), so that the checks that run at most once a second (the
    dead-peer scan of every connection) run in each timed tick.
    """
    source.used = used
    times = []
    for _ in range(ticks):
        await asyncio.sleep(gap)
        t0 = time.perf_counter()
        await guard.tick()
        times.append(1000 * (time.perf_counter() - t0))
    return times


async def _run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    memory: dict[str, list[dict[str, float]]] = {"bare": [], "wrapping": [], "guarded": []}
    for i in range(args.rounds):
        for name in ("bare", "wrapping", "guarded"):
            app: Any = chat_app if name == "bare" else Wrapping(chat_app)
            guard = None
            if name == "guarded":
                guard = _guard(FakeSource(used=100))
                app = GuardMiddleware(chat_app, guard=guard)
            memory[name].append(await measure_memory(app, args.sessions))
            if guard is not None:
                assert len(guard.registry) == 0, "sessions left open"
                await guard.stop()
        log(f"  round {i + 1}/{args.rounds}: bare {memory['bare'][-1]['bytes_per_session']:,.0f}"
            f", wrapping {memory['wrapping'][-1]['bytes_per_session']:,.0f}"
            f", guarded {memory['guarded'][-1]['bytes_per_session']:,.0f} B/session")
    added = [g["bytes_per_session"] - b["bytes_per_session"]
             for g, b in zip(memory["guarded"], memory["bare"], strict=True)]
    beyond_wrapping = [g["bytes_per_session"] - w["bytes_per_session"]
                       for g, w in zip(memory["guarded"], memory["wrapping"], strict=True)]
    # The tick, with every session open and idle.
    source = FakeSource(used=100)
    guard = _guard(source)
    clients, tasks = await open_sessions(GuardMiddleware(chat_app, guard=guard), args.sessions)
    await guard.stop()  # the test drives the ticks itself
    idle = guard.registry.idle_count
    normal = await time_ticks(guard, source, 100, args.ticks, args.tick_gap)
    warn = await time_ticks(guard, source, 800, args.ticks, args.tick_gap)  # warn_at 0.75
    level = guard.policy.level.name.lower()
    await close_sessions(clients, tasks)
    left = len(guard.registry)
    return {
        "sessions": args.sessions,
        "idle_sessions_seen": idle,
        "memory_rounds": memory,
        "median_bytes_per_session": {k: statistics.median(r["bytes_per_session"] for r in v)
                                     for k, v in memory.items()},
        "median_added_bytes_per_session": statistics.median(added),
        "median_bookkeeping_bytes_per_session": statistics.median(beyond_wrapping),
        "median_guard_files_bytes_per_session": statistics.median(
            r["guard_files_bytes_per_session"] for r in memory["guarded"]),
        "tick_ms": {"normal": {"median": statistics.median(normal), "max": max(normal)},
                    "warn": {"median": statistics.median(warn), "max": max(warn),
                             "level_seen": level}},
        "sessions_left_open": left,
    }


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    log(f"{args.sessions:,} idle WebSocket sessions, {args.rounds} rounds, {args.ticks} ticks")
    return asyncio.run(_run(args, log))


def markdown(result: dict[str, Any]) -> str:
    per, tick = result["median_bytes_per_session"], result["tick_ms"]
    return "\n".join([
        f"{result['sessions']:,} concurrent idle WebSocket sessions "
        f"({result['idle_sessions_seen']:,} idle in the registry), in process:",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| traced bytes per connection, bare app | {per['bare']:,.0f} |",
        f"| traced bytes per connection, a minimal wrapping middleware | "
        f"{per['wrapping']:,.0f} |",
        f"| traced bytes per connection, GuardMiddleware | {per['guarded']:,.0f} |",
        f"| added by the guard per session, all of it (over bare) | "
        f"{result['median_added_bytes_per_session']:,.0f} |",
        f"| **the guard's bookkeeping per session** (over the wrapping floor; target <= 1024) | "
        f"**{result['median_bookkeeping_bytes_per_session']:,.0f}** |",
        f"| of which allocated in llm_guard_sdk files | "
        f"{result['median_guard_files_bytes_per_session']:,.0f} |",
        f"| one tick, normal level: median / max ms | {tick['normal']['median']:.2f} / "
        f"{tick['normal']['max']:.2f} |",
        f"| one tick, warn level: median / max ms | {tick['warn']['median']:.2f} / "
        f"{tick['warn']['max']:.2f} |",
        f"| sessions left open after the clients left | {result['sessions_left_open']} |",
    ])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = harness.new_parser("benchmarks.ws_scale", __doc__ or "")
    parser.add_argument("--sessions", type=int, help="concurrent idle sessions (10000)")
    parser.add_argument("--rounds", type=int, help="memory rounds, bare and guarded (3)")
    parser.add_argument("--ticks", type=int, help="ticks timed per level (11)")
    parser.add_argument("--tick-gap", type=float, default=1.05,
                        help="seconds between timed ticks (1.05: the once-a-second checks run)")
    args = harness.parse(parser, argv, quick={"sessions": 500, "rounds": 1, "ticks": 5},
                         full={"sessions": 10_000, "rounds": 3, "ticks": 11})
    if min(args.sessions, args.rounds, args.ticks) < 1:
        parser.error("--sessions, --rounds and --ticks must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.main("benchmarks.ws_scale", argv, args, harness.environment(()), run,
                        markdown)


if __name__ == "__main__":
    raise SystemExit(main())
