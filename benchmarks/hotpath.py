"""Hot path: nanoseconds the guard adds per streamed chunk, in process.

Run from the repository root::

    python -m benchmarks.hotpath --json /tmp/bench/hotpath.json   # 5,000 chunks x 41 repeats
    python -m benchmarks.hotpath --quick

The endpoint of :mod:`benchmarks.peer_apps` (Starlette ``StreamingResponse`` over an async
generator of 32-byte chunks) is called directly with an in-memory ``receive`` and a ``send``
that only counts, as uvicorn calls it (ASGI spec 2.3, so Starlette also listens for the
disconnect), four ways: bare; in ``GuardMiddleware``; with the generator in ``guard_stream``;
both (the SDK's setup). Each repeat runs the four back to back; a variant's added cost is the
median over repeats of (its ns per chunk - bare's in the same repeat), so drift in host load
cancels. Time is the thread's CPU time (``time.thread_time_ns``), which a loaded machine
disturbs less than the wall clock; the wall-clock figures are reported beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import harness
from benchmarks.harness import Log
from benchmarks.peer_apps import make_app
from llm_guard_sdk import GuardConfig, GuardMiddleware, hotpath
from tests.support.asgi import SendRecorder, http_scope, receive_request

VARIANTS = ("bare", "middleware", "guard_stream", "middleware+guard_stream")


def build(name: str) -> Any:
    """The app of one variant."""
    app = make_app(guarded_stream="guard_stream" in name)
    if name.startswith("middleware"):
        return GuardMiddleware(app, config=GuardConfig.defaults(sources=("process",)))
    return app


async def drive(app: Any, chunks: int) -> tuple[int, int]:
    """One request of ``chunks`` chunks: (thread CPU ns, wall ns)."""
    scope = http_scope("/stream", spec_version="2.3", query_string=f"n={chunks}&s=32".encode())
    send = SendRecorder(keep=False)
    cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
    await app(scope, receive_request(), send)
    cpu, wall = time.thread_time_ns() - cpu0, time.perf_counter_ns() - wall0
    if send.count != chunks + 2:
        raise RuntimeError(f"sent {send.count} messages, expected {chunks + 2}")
    return cpu, wall


def _added(samples: dict[str, list[float]]) -> dict[str, float]:
    bare = samples["bare"]
    return {name: statistics.median(v - b for v, b in zip(values, bare, strict=True))
            for name, values in samples.items() if name != "bare"}


async def _run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    apps = {name: build(name) for name in VARIANTS}
    for app in apps.values():  # warm-up (and start the guards' samplers)
        await drive(app, 500)
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    wall: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for i in range(args.repeats):
        for name, app in apps.items():
            gc.collect()
            c, w = await drive(app, args.chunks)
            cpu[name].append(c / args.chunks)
            wall[name].append(w / args.chunks)
        if (i + 1) % max(1, args.repeats // 5) == 0:
            log(f"  repeat {i + 1}/{args.repeats}: " + "  ".join(
                f"{name} {cpu[name][-1]:,.0f}" for name in VARIANTS) + " ns/chunk (CPU)")
    guards = [app.guard for app in apps.values() if isinstance(app, GuardMiddleware)]
    left = sum(len(g.registry) for g in guards)
    errors = sum(g.internal_errors_total for g in guards)
    for guard in guards:
        await guard.stop()
    return {
        "median_cpu_ns_per_chunk": {k: statistics.median(v) for k, v in cpu.items()},
        "added_cpu_ns_per_chunk": _added(cpu),
        "median_wall_ns_per_chunk": {k: statistics.median(v) for k, v in wall.items()},
        "added_wall_ns_per_chunk": _added(wall),
        "samples_cpu_ns_per_chunk": cpu,
        "sessions_left_open": left,
        "internal_errors_total": errors,
    }


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    log(f"in process: {args.chunks:,} chunks x {args.repeats} repeats, variants alternating")
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        pass
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_run(args, log))


def markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    cpu, wall = result["median_cpu_ns_per_chunk"], result["median_wall_ns_per_chunk"]
    added_cpu, added_wall = result["added_cpu_ns_per_chunk"], result["added_wall_ns_per_chunk"]
    lines = [
        f"In process, Starlette StreamingResponse, {cfg['chunks']:,} chunks x 32 B per request, "
        f"{cfg['repeats']} repeats (variants alternating), hot path: "
        f"{result['environment']['hot_path'] if 'environment' in result else '?'}:",
        "",
        "| variant | CPU ns / chunk | added CPU ns / chunk | wall ns / chunk | added wall ns |",
        "|---|---:|---:|---:|---:|",
        f"| bare | {cpu['bare']:,.0f} | - | {wall['bare']:,.0f} | - |",
    ]
    for name in VARIANTS[1:]:
        lines.append(f"| {name} | {cpu[name]:,.0f} | **{added_cpu[name]:,.0f}** | "
                     f"{wall[name]:,.0f} | {added_wall[name]:,.0f} |")
    lines += ["", f"Sessions left open: {result['sessions_left_open']}, internal errors: "
              f"{result['internal_errors_total']}."]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = harness.new_parser("benchmarks.hotpath", __doc__ or "")
    parser.add_argument("--chunks", type=int, help="chunks per request (5000)")
    parser.add_argument("--repeats", type=int, help="repeats, variants alternating (41)")
    parser.add_argument("--pure-python", action="store_true",
                        help="measure the pure-Python hot path even where the C one is built")
    args = harness.parse(parser, argv, quick={"chunks": 1000, "repeats": 5},
                         full={"chunks": 5000, "repeats": 41})
    if min(args.chunks, args.repeats) < 1:
        parser.error("--chunks and --repeats must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.pure_python:
        hotpath.native = None  # read by each connection and stream as it starts
    env = harness.environment(("starlette", "uvloop"))
    return harness.main("benchmarks.hotpath", argv, args, env, run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
