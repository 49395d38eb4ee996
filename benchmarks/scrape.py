"""Metrics scrape cost: ``GET /llm-guard/metrics`` with 10,000 sessions, loop lag, streaming.

Run from the repository root::

    python -m benchmarks.scrape            # 10,000 sessions, 4 x (5 s quiet + 5 s scraping)
    python -m benchmarks.scrape --quick    # 2,000 sessions, 2 x (1.5 s + 1.5 s)

In process, one guard with the metrics extension (``sample_interval`` 0.25 s, as deployed) and
its sampler running; ``--sessions`` sessions open: all idle WebSockets (spread over 50 tenants)
except ``--streams`` HTTP sessions whose guarded streams each yield a chunk every 10 ms to a
consumer task. ``--rounds`` pairs of phases of ``--seconds`` each, alternated: *quiet* (no
scrape) and *scraping* (the control route called through ``GuardMiddleware`` every
``--interval`` seconds, as a busy Prometheus or several would). In both a probe task sleeps
1 ms in a loop and records how late it wakes (the event-loop lag every request on the worker
sees), and the consumers record the largest gap between two chunks. Also reported: the time
of each scrape (the ASGI call, render included), of the metrics' tick hook, and of its slow
refresh (tenants: a pass over the sessions, every 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from benchmarks import harness
from benchmarks.harness import Log
from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware
from llm_guard_sdk.metrics import GuardMetrics
from llm_guard_sdk.stream import guard_stream
from tests.support.asgi import SendRecorder, http_scope, receive_request

CHUNK_GAP = 0.01


def ms(values: list[float]) -> dict[str, float]:
    """Median, p99 and max of seconds, in milliseconds."""
    if not values:
        return {"median": 0.0, "p99": 0.0, "max": 0.0}
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered) * 1e3, 3),
            "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1e3, 3),
            "max": round(ordered[-1] * 1e3, 3)}


class Timed:
    """Wraps a callable and records how long each call took."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.times: list[float] = []

    def __call__(self, *args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.fn(*args)
        finally:
            self.times.append(time.perf_counter() - t0)


class GcPauses:
    """Durations of the collector's runs (``gc.callbacks``), to tell its pauses from ours."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self.full = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)
            self.full += info.get("generation") == 2


async def probe(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t0 - 0.001)


async def chunks() -> AsyncIterator[bytes]:
    while True:
        await asyncio.sleep(CHUNK_GAP)
        yield b"data: token\n\n"


async def consume(guard: Guard, gaps: list[float], counts: list[int]) -> None:
    session = guard.registry.open("http", "/v1/chat/completions", tenant="streaming")
    last = time.perf_counter()
    async for _ in guard_stream(chunks(), session=session):
        now = time.perf_counter()
        gaps.append(now - last)
        counts[0] += 1
        last = now


async def scrape_once(app: GuardMiddleware) -> tuple[float, int]:
    send = SendRecorder()
    t0 = time.perf_counter()
    await app(http_scope("/llm-guard/metrics"), receive_request(), send)
    took = time.perf_counter() - t0
    assert send.messages[0]["status"] == 200, send.messages[0]
    return took, len(send.body)


class Phase:
    """What the probe, the consumers, the collector and the scrapes saw in phases of one kind."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.gaps: list[float] = []
        self.scrapes: list[float] = []
        self.pauses = GcPauses()
        self.chunks = 0
        self.body = 0

    def summary(self) -> dict[str, Any]:
        return {"loop_lag_ms": ms(self.lags), "chunk_gap_ms": ms(self.gaps),
                "chunks": self.chunks, "gc_pause_ms": ms(self.pauses.pauses),
                "gc_full_collections": self.pauses.full, "scrapes": len(self.scrapes),
                "scrape_ms": ms(self.scrapes), "body_bytes": self.body}


async def phase(app: GuardMiddleware, seconds: float, interval: float | None,
                gaps: list[float], counts: list[int], into: Phase) -> None:
    lags, scrapes = into.lags, into.scrapes
    gc.callbacks.append(into.pauses)
    stop = asyncio.Event()
    task = asyncio.create_task(probe(lags, stop))
    gaps.clear()
    counts[0] = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if interval is None:
            await asyncio.sleep(0.1)
            continue
        took, into.body = await scrape_once(app)
        scrapes.append(took)
        await asyncio.sleep(interval)
    stop.set()
    await task
    gc.callbacks.remove(into.pauses)
    into.gaps.extend(gaps)
    into.chunks += counts[0]


async def measure(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    metrics = GuardMetrics()
    guard = Guard(GuardConfig.defaults(sources=("process",), memory_limit="1Ti",
                                       sample_interval=0.25, max_sessions=args.sessions + 10,
                                       tenant_header="x-tenant"), extensions=[metrics])
    tick_hook = Timed(metrics.tick)
    slow = Timed(metrics.publisher.update_slow)
    metrics.publisher.update_slow = slow  # type: ignore[method-assign]
    guard.tick_hooks[guard.tick_hooks.index(metrics.tick)] = tick_hook
    app = GuardMiddleware(lambda *_: None, guard=guard)
    for i in range(args.sessions - args.streams):
        guard.registry.open("websocket", "/ws/chat", tenant=f"tenant-{i % 50}")
    gaps: list[float] = []
    counts = [0]
    consumers = [asyncio.create_task(consume(guard, gaps, counts)) for _ in range(args.streams)]
    guard.ensure_started()
    await asyncio.sleep(1.0)  # streams running, a few ticks done
    log(f"{len(guard.registry)} sessions open ({guard.registry.streams_open} streaming)")
    tick_hook.times.clear()
    slow.times.clear()
    kinds = {"quiet": Phase(), "scraping": Phase()}
    for _ in range(args.rounds):  # alternated, so the machine's load hits both alike
        await phase(app, args.seconds, None, gaps, counts, kinds["quiet"])
        await phase(app, args.seconds, args.interval, gaps, counts, kinds["scraping"])
    quiet, scraping = kinds["quiet"].summary(), kinds["scraping"].summary()
    log(f"quiet: loop lag {quiet['loop_lag_ms']}")
    log(f"scraping: {scraping['scrapes']} scrapes, {scraping['scrape_ms']}, "
        f"loop lag {scraping['loop_lag_ms']}")
    renders = []
    for _ in range(20):
        t0 = time.perf_counter()
        metrics.render()
        renders.append(time.perf_counter() - t0)
    for task in consumers:
        task.cancel()
    await asyncio.gather(*consumers, return_exceptions=True)
    await guard.stop()
    return {"sessions": args.sessions, "streams": args.streams, "quiet": quiet,
            "scraping": scraping, "render_ms": ms(renders), "tick_hook_ms": ms(tick_hook.times),
            "slow_refresh_ms": ms(slow.times),
            "expected_chunks_per_phase": int(args.streams * args.seconds * args.rounds
                                             / CHUNK_GAP)}


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    return asyncio.run(measure(args, log))


def report(result: dict[str, Any]) -> str:
    quiet, busy = result["quiet"], result["scraping"]

    def row(name: str, key: str) -> str:
        q, b = quiet[key], busy[key]
        return f"| {name} | {q['median']} / {q['p99']} / {q['max']} | " \
               f"{b['median']} / {b['p99']} / {b['max']} |"

    return "\n".join([
        f"{result['sessions']:,} sessions ({result['streams']} streaming, a chunk every "
        f"{CHUNK_GAP * 1e3:.0f} ms each)", "",
        "| median / p99 / max, ms | quiet | scraping |", "|---|---:|---:|",
        row("event-loop lag (1 ms probe)", "loop_lag_ms"),
        row("gap between chunks", "chunk_gap_ms"),
        row("garbage collector pauses", "gc_pause_ms"),
        f"| full (generation 2) collections | {quiet['gc_full_collections']} | "
        f"{busy['gc_full_collections']} |",
        f"| chunks delivered (of ~{result['expected_chunks_per_phase']:,}) | {quiet['chunks']:,} "
        f"| {busy['chunks']:,} |", "",
        "| per call, ms | median | p99 | max |", "|---|---:|---:|---:|",
        *(f"| {name} | {v['median']} | {v['p99']} | {v['max']} |" for name, v in (
            (f"scrape through the middleware ({busy['scrapes']} calls, "
             f"{busy['body_bytes']:,} B)", busy["scrape_ms"]),
            ("render alone", result["render_ms"]),
            ("metrics tick hook (every tick)", result["tick_hook_ms"]),
            ("slow refresh (tenants, every 5 s)", result["slow_refresh_ms"]))),
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.new_parser("benchmarks.scrape", __doc__ or "")
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--streams", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--interval", type=float, help="seconds between two scrapes")
    parser.add_argument("--rounds", type=int, help="quiet/scraping phase pairs, alternated")
    args = harness.parse(parser, argv,
                         quick={"sessions": 2000, "streams": 50, "seconds": 1.5, "interval": 0.1,
                                "rounds": 2},
                         full={"sessions": 10_000, "streams": 200, "seconds": 5.0,
                               "interval": 0.1, "rounds": 4})
    env = harness.environment(["prometheus-client"])
    return harness.main("benchmarks.scrape", argv, args, env, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
