"""Dashboard feed: the cost of one snapshot with 10,000 sessions, and the event-loop lag while
pages are connected.

Run from the repository root::

    python -m benchmarks.dashboard_feed                # 10,000 sessions, 3 pages, 20 s phases
    python -m benchmarks.dashboard_feed --quick        # 1,000 sessions, short phases
    python -m benchmarks.dashboard_feed --json out.json

One guard (``sources=("process",)``, a 1 TiB limit so it stays at ``normal``), ``--sessions``
sessions: a third idle WebSockets, the rest HTTP, each holding a different number of bytes.

* **build**: ``Dashboard.snapshot()`` (one pass over the sessions, the top 50 by held bytes,
  the counters) and its SSE encoding, ``--builds`` times: median, p99 and max, wall clock and
  the thread's CPU time (which leaves out time the loaded machine descheduled the process);
  and the event's size.
* **lag**: the guard's own sampler runs (``sample_interval`` 0.25 s, the default) while a probe
  task sleeps 1 ms in a loop and records how late it wakes (what every stream on that worker
  would see). First ``--seconds`` with no page (history points only), then as long with
  ``--pages`` subscriptions reading the feed (one snapshot per second shared by all).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import harness
from benchmarks.harness import Log


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def make_guard(sessions: int) -> Any:
    from llm_guard_sdk import Guard, GuardConfig

    guard = Guard(GuardConfig(sources=("process",), memory_limit=2**40,
                              max_sessions=sessions + 1, sample_interval=0.25))
    for n in range(sessions):
        session = guard.registry.open("websocket" if n % 3 == 0 else "http", "/v1/chat",
                                      tenant=f"tenant-{n % 40}")
        session.attached_bytes = (n * 7919) % 1_000_003
    return guard


def measure_build(guard: Any, builds: int) -> dict[str, Any]:
    from llm_guard_sdk.dashboard import sse_event

    dashboard = guard.extension("dashboard")
    wall_ms: list[float] = []
    cpu_ms: list[float] = []
    encode_ms: list[float] = []
    size = 0
    for _ in range(builds):
        start, cpu = time.perf_counter(), time.thread_time()
        snapshot = dashboard.snapshot()
        wall_ms.append((time.perf_counter() - start) * 1000)
        cpu_ms.append((time.thread_time() - cpu) * 1000)
        start = time.perf_counter()
        size = len(sse_event("snapshot", snapshot))
        encode_ms.append((time.perf_counter() - start) * 1000)
    return {
        "builds": builds,
        "median_build_ms": round(statistics.median(wall_ms), 2),
        "p99_build_ms": round(percentile(wall_ms, 0.99), 2),
        "max_build_ms": round(max(wall_ms), 2),
        "median_build_cpu_ms": round(statistics.median(cpu_ms), 2),
        "max_build_cpu_ms": round(max(cpu_ms), 2),
        "median_encode_ms": round(statistics.median(encode_ms), 2),
        "event_bytes": size,
    }


async def probe(stop: asyncio.Event, lags: list[float]) -> None:
    """Sleep 1 ms at a time and record how late each wake-up is."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - start - 0.001)


async def read_feed(subscription: Any, received: list[int]) -> None:
    async for chunk in subscription:
        received.append(len(chunk))


async def phase(guard: Any, pages: int, seconds: float) -> dict[str, Any]:
    from llm_guard_sdk.dashboard import sse_event

    dashboard = guard.extension("dashboard")
    built_before = dashboard.feed.built_total
    stop, lags = asyncio.Event(), list[float]()
    received: list[int] = []
    subscriptions = [dashboard.feed.subscribe([sse_event("history",
                                                         dashboard.history_document())])
                     for _ in range(pages)]
    readers = [asyncio.create_task(read_feed(s, received)) for s in subscriptions]
    prober = asyncio.create_task(probe(stop, lags))
    await asyncio.sleep(seconds)
    stop.set()
    await prober
    for reader, subscription in zip(readers, subscriptions, strict=True):
        reader.cancel()
        await subscription.aclose()
    lag_ms = [x * 1000 for x in lags]
    return {
        "pages": pages,
        "seconds": seconds,
        "snapshots_built": dashboard.feed.built_total - built_before,
        "events_received": len(received),
        "max_lag_ms": round(max(lag_ms), 2),
        "p99_lag_ms": round(percentile(lag_ms, 0.99), 2),
        "median_lag_ms": round(statistics.median(lag_ms), 3),
    }


async def measure_lag(guard: Any, pages: int, seconds: float) -> list[dict[str, Any]]:
    guard.ensure_started()
    try:
        return [await phase(guard, 0, seconds), await phase(guard, pages, seconds)]
    finally:
        await guard.stop()


def run(args: Any, log: Log) -> dict[str, Any]:
    import llm_guard_sdk

    log(f"opening {args.sessions:,} sessions ...")
    guard = make_guard(args.sessions)
    log(f"building {args.builds} snapshots ...")
    build = measure_build(guard, args.builds)
    log(f"event-loop lag: {args.seconds} s without a page, then {args.seconds} s with "
        f"{args.pages} ...")
    lag = asyncio.run(measure_lag(guard, args.pages, args.seconds))
    return {"sdk_path": llm_guard_sdk.__file__, "sessions": args.sessions, "build": build,
            "lag": lag}


def report(result: dict[str, Any]) -> str:
    b = result["build"]
    lines = [f"llm_guard_sdk from {result['sdk_path']}", "",
             f"One snapshot with {result['sessions']:,} sessions ({b['builds']} builds, "
             f"event of {b['event_bytes']:,} bytes):", "",
             "| median ms | p99 ms | max ms | median CPU ms | max CPU ms | median encode ms |",
             "|---:|---:|---:|---:|---:|---:|",
             f"| {b['median_build_ms']} | {b['p99_build_ms']} | {b['max_build_ms']} "
             f"| {b['median_build_cpu_ms']} | {b['max_build_cpu_ms']} "
             f"| {b['median_encode_ms']} |", "",
             "Event-loop lag with the sampler running:", "",
             "| pages | seconds | snapshots built | events received | median lag ms "
             "| p99 lag ms | max lag ms |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for p in result["lag"]:
        lines.append(f"| {p['pages']} | {p['seconds']} | {p['snapshots_built']} "
                     f"| {p['events_received']} | {p['median_lag_ms']} | {p['p99_lag_ms']} "
                     f"| {p['max_lag_ms']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.new_parser("benchmarks.dashboard_feed", __doc__ or "")
    parser.add_argument("--sessions", type=int, help="sessions in the table")
    parser.add_argument("--builds", type=int, help="snapshots built for the build timing")
    parser.add_argument("--pages", type=int, default=3, help="pages reading the feed")
    parser.add_argument("--seconds", type=float, help="length of each lag phase")
    args = harness.parse(parser, argv, quick={"sessions": 1000, "builds": 20, "seconds": 3.0},
                         full={"sessions": 10_000, "builds": 100, "seconds": 20.0})
    env = harness.environment(())
    runner: Callable[[Any, Log], dict[str, Any]] = run
    return harness.main("benchmarks.dashboard_feed", argv, args, env, runner, report)


if __name__ == "__main__":
    raise SystemExit(main())
