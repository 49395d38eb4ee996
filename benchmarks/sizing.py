"""Attachment sizing: how long the sampler blocks the event loop with one big attachment.

Run from the repository root::

    python -m benchmarks.sizing                 # every scenario below
    python -m benchmarks.sizing --quick         # smaller attachments, fewer ticks
    python -m benchmarks.sizing --json out.json

One guard (``sources=("process",)``, a 1 TiB limit so it stays at ``normal``, default
``size_budget_ms``), one session holding one attachment, and the sampler's ``tick()`` called
every ``--interval`` seconds for ``--ticks`` ticks while a probe task sleeps 1 ms in a loop and
records how late it wakes up (the loop lag every other request on this worker would see).
Scenarios, each what a real app may hold for one conversation:

* ``history_50k``: a chat history of 50,000 messages (``{"role", "content"}`` dicts, 20-1000
  characters of text each, ~30 MiB);
* ``buffers_1gib``: 1 GiB as a list of 1,024 ``bytes`` of 1 MiB (audio or file chunks);
* ``bytearray_1gib``: 1 GiB as one ``bytearray`` (a single growing buffer);
* ``history_1gib``: 1 GiB of small objects: ~880,000 messages of ~1 KiB (a huge history or a
  cache of documents): the worst case for a deep-size walk.

For each: the longest tick (wall clock; and the CPU time of that thread, which leaves out time
the process spent descheduled on a loaded machine; and the sizer's own CPU share of a tick),
the worst and the 99th-percentile loop lag, how many ticks until a size was known, and that
size (and ``estimated`` where the SDK reports it). The script runs against whichever
``llm_guard_sdk`` is first on ``sys.path``, so the same file measures an older
checkout too (run it from that checkout's root).
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import harness
from benchmarks.harness import Log

MiB = 2**20
SCENARIOS = ("history_50k", "buffers_1gib", "bytearray_1gib", "history_1gib")


def build(name: str, scale: float) -> Any:
    """The attachment of scenario ``name``; ``scale`` < 1 shrinks it (``--quick``)."""
    if name == "history_50k":
        return [{"role": ("user", "assistant")[i % 2],
                 "content": f"message {i}: " + "lorem ipsum " * (i % 83)}
                for i in range(int(50_000 * scale))]
    if name == "buffers_1gib":
        return [bytes(MiB) for _ in range(int(1024 * scale))]
    if name == "bytearray_1gib":
        return bytearray(int(1024 * MiB * scale))
    if name == "history_1gib":
        return [{"role": "user", "content": f"{i:08d}" + "d" * 1100}
                for i in range(int(880_000 * scale))]
    raise ValueError(f"unknown scenario {name!r}; expected one of {', '.join(SCENARIOS)}")


async def probe(stop: asyncio.Event, lags: list[float]) -> None:
    """Sleep 1 ms at a time and record how late each wake-up is."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - start - 0.001)


async def measure(name: str, attachment: Any, ticks: int, interval: float) -> dict[str, Any]:
    from llm_guard_sdk import Guard, GuardConfig

    guard = Guard(GuardConfig(sources=("process",), memory_limit=2**40))
    session = guard.registry.open("websocket")
    session.attach(attachment)
    sizing_cpu_ms: list[float] = []
    measure_sessions = guard.sizer.measure

    def timed(sessions: Any) -> Any:  # the sizer's own share of the tick
        cpu = time.thread_time()
        try:
            return measure_sessions(sessions)
        finally:
            sizing_cpu_ms.append((time.thread_time() - cpu) * 1000)

    guard.sizer.measure = timed  # type: ignore[method-assign]
    stop, lags = asyncio.Event(), list[float]()
    prober = asyncio.create_task(probe(stop, lags))
    tick_ms: list[float] = []
    tick_cpu_ms: list[float] = []
    first_known: int | None = None
    await asyncio.sleep(0.05)
    for i in range(ticks):
        start, cpu = time.perf_counter(), time.thread_time()
        await guard.tick()
        tick_ms.append((time.perf_counter() - start) * 1000)
        tick_cpu_ms.append((time.thread_time() - cpu) * 1000)
        if first_known is None and session.attached_bytes:
            first_known = i + 1
        await asyncio.sleep(interval)
    stop.set()
    await prober
    lag_ms = sorted(x * 1000 for x in lags)
    return {
        "scenario": name,
        "ticks": ticks,
        "max_tick_ms": round(max(tick_ms), 2),
        "median_tick_ms": round(statistics.median(tick_ms), 2),
        "max_tick_cpu_ms": round(max(tick_cpu_ms), 2),
        "max_sizing_cpu_ms": round(max(sizing_cpu_ms), 2),
        "max_lag_ms": round(lag_ms[-1], 2),
        "p99_lag_ms": round(lag_ms[int(0.99 * (len(lag_ms) - 1))], 2),
        "ticks_until_size_known": first_known,
        "attached_bytes": session.attached_bytes,
        "estimated": getattr(session, "attached_estimated", None),
    }


def run(args: Any, log: Log) -> dict[str, Any]:
    import llm_guard_sdk

    results = []
    for name in args.scenarios:
        log(f"building {name} ...")
        attachment = build(name, args.scale)
        gc.collect()
        log(f"measuring {name} ({args.ticks} ticks every {args.interval} s) ...")
        results.append(asyncio.run(measure(name, attachment, args.ticks, args.interval)))
        del attachment
        gc.collect()
    return {"sdk_path": llm_guard_sdk.__file__, "results": results}


def report(result: dict[str, Any]) -> str:
    lines = [f"llm_guard_sdk from {result['sdk_path']}", "",
             "| scenario | max tick ms | median tick ms | max tick CPU ms | max sizing CPU ms "
             "| max loop lag ms | p99 loop lag ms | ticks until sized | attached bytes "
             "| estimated |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in result["results"]:
        lines.append(
            f"| {r['scenario']} | {r['max_tick_ms']} | {r['median_tick_ms']} "
            f"| {r['max_tick_cpu_ms']} | {r['max_sizing_cpu_ms']} | {r['max_lag_ms']}"
            f" | {r['p99_lag_ms']} | {r['ticks_until_size_known']} | {r['attached_bytes']:,}"
            f" | {r['estimated']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.new_parser("benchmarks.sizing", __doc__ or "")
    parser.add_argument("--scenarios", type=lambda s: tuple(s.split(",")), default=SCENARIOS,
                        help="comma-separated, out of " + ", ".join(SCENARIOS))
    parser.add_argument("--ticks", type=int, help="sampler ticks per scenario")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between ticks")
    parser.add_argument("--scale", type=float, help="attachment size factor (1 = as described)")
    args = harness.parse(parser, argv, quick={"ticks": 10, "scale": 0.05},
                         full={"ticks": 40, "scale": 1.0})
    env = harness.environment(("pympler",))
    runner: Callable[[Any, Log], dict[str, Any]] = run
    return harness.main("benchmarks.sizing", argv, args, env, runner, report)


if __name__ == "__main__":
    raise SystemExit(main())
