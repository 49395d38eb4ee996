"""Adaptive timeouts: what they add per chunk, per tick, and what the estimator costs.

Run from the repository root::

    python -m benchmarks.adaptive            # 100,000 messages x 9 repeats, 1000 streams per tick
    python -m benchmarks.adaptive --quick

Three measurements:

1. **Per chunk, in process.** A pure-ASGI endpoint streaming N body messages, driven with a fake
   ``receive`` and a counting ``send`` (as ``benchmarks.overhead`` does): bare, guarded
   (``GuardMiddleware`` + ``guard_stream``, today's defaults) and guarded with adaptive timeouts
   on. The model yields to the loop every 100 chunks and the guards sample every 10 ms, so the
   samplers' ticks run during the request and their cost is in the per-message figure.
2. **Per tick.** ``StreamTimeouts.run()`` over N open streams that each made 8 chunks of
   progress since the last tick: static timeouts only versus adaptive. Divided by the streams
   and by the chunks, it is what the adaptive bookkeeping costs per stream and per chunk.
3. **The estimator.** ``LogHistogram.add`` and a two-window P99.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from benchmarks import harness
from benchmarks.harness import Log
from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware, guard_stream
from llm_guard_sdk.actions import AdaptiveTimeouts, AdaptiveTimeoutSettings, StreamTimeouts
from llm_guard_sdk.actions.latency import LogHistogram, RollingQuantile
from llm_guard_sdk.registry import SessionRegistry
from tests.support.asgi import SendRecorder, http_scope, receive_request
from tests.support.guard import FakeStream

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
START = {"type": "http.response.start", "status": 200, "headers": []}
END = {"type": "http.response.body", "body": b"", "more_body": False}
ON = AdaptiveTimeoutSettings(enabled=True, jitter=0.5, min_samples=1)


async def model(count: int) -> AsyncIterator[bytes]:
    chunk = b"x" * 32
    for i in range(count):
        if i % 100 == 0:
            await asyncio.sleep(0)  # a real model awaits; this lets the sampler tick run
        yield chunk


def make_app(count: int, *, guarded: bool) -> App:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body: AsyncIterator[bytes] = model(count)
        if guarded:
            body = guard_stream(body, name="bench")
        await send(START)
        async for chunk in body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send(END)

    return app


def guarded(count: int, *, adaptive: bool) -> GuardMiddleware:
    config = GuardConfig(sources=("process",), sample_interval=0.01)
    extensions = [AdaptiveTimeouts(ON)] if adaptive else []
    return GuardMiddleware(make_app(count, guarded=True),
                           guard=Guard(config, extensions=extensions))


async def per_chunk(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    n = args.messages
    variants: dict[str, App] = {
        "bare": make_app(n, guarded=False),
        "guard": guarded(n, adaptive=False),
        "guard+adaptive": guarded(n, adaptive=True),
    }
    scope = http_scope("/stream", client=("127.0.0.1", 40000))
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for app in variants.values():  # warm-up; starts the samplers
        await app(scope, receive_request(), SendRecorder(keep=False))
    for i in range(args.repeats):
        for name, app in variants.items():
            gc.collect()
            send = SendRecorder(keep=False)
            t0 = time.perf_counter_ns()
            await app(scope, receive_request(), send)
            samples[name].append((time.perf_counter_ns() - t0) / send.count)
        log(f"  repeat {i + 1}/{args.repeats}: " + "  ".join(
            f"{k} {v[-1]:.0f} ns/msg" for k, v in samples.items()))
    ticks = {}
    for name, app in variants.items():
        if isinstance(app, GuardMiddleware):
            ticks[name] = app.guard.status()["timeouts" if name == "guard+adaptive" else "level"]
            await app.guard.stop()

    def added(name: str, base: str) -> float:
        return statistics.median(a - b for a, b in zip(samples[name], samples[base], strict=True))

    return {
        "median_ns_per_message": {k: statistics.median(v) for k, v in samples.items()},
        "added_ns_per_message_vs_bare": {k: added(k, "bare") for k in variants if k != "bare"},
        "adaptive_minus_guard_ns_per_message": added("guard+adaptive", "guard"),
        "adaptive_routes_seen": sorted(ticks["guard+adaptive"]["routes"]),
    }


async def per_tick(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    results: dict[str, float] = {}
    for name in ("static", "adaptive"):
        registry = SessionRegistry(args.streams + 1)
        streams = []
        for _ in range(args.streams):
            session = registry.open("http", "/v1/chat/completions")
            stream = FakeStream("s")
            stream.started_at = time.monotonic()
            stream.waiting = True
            session.add_stream(stream)
            streams.append(stream)
        timeouts = StreamTimeouts(registry, chunk_timeout=30.0, stream_timeout=None)
        if name == "adaptive":
            timeouts.use_limits(AdaptiveTimeouts(ON))
        times = []
        for _ in range(args.ticks):
            for stream in streams:
                stream.chunks += 8
            t0 = time.perf_counter_ns()
            await timeouts.run()
            times.append(time.perf_counter_ns() - t0)
        results[name] = statistics.median(times)
        log(f"  {name}: {results[name] / 1000:.0f} us per tick of {args.streams} streams")
    extra = (results["adaptive"] - results["static"]) / args.streams
    return {
        "streams": args.streams,
        "median_us_per_tick": {k: v / 1000 for k, v in results.items()},
        "adaptive_added_ns_per_stream_per_tick": extra,
        "adaptive_added_ns_per_chunk_at_8_chunks_per_tick": extra / 8,
    }


def estimator(args: argparse.Namespace) -> dict[str, Any]:
    histogram = LogHistogram(low=1e-3, high=1e3)  # the range the adaptive timeouts use
    values = [0.001 * (1 + i % 5000) for i in range(args.adds)]
    t0 = time.perf_counter_ns()
    for v in values:
        histogram.add(v)
    add_ns = (time.perf_counter_ns() - t0) / len(values)
    rolling = RollingQuantile(300.0, low=1e-3, high=1e3)
    for v in values:
        rolling.add(v)
    rolling.rotate(300.0)
    rolling.add(0.5, 1000)
    t0 = time.perf_counter_ns()
    for _ in range(200):
        rolling.quantile(0.99)
    return {"add_ns": add_ns, "p99_two_windows_us": (time.perf_counter_ns() - t0) / 200 / 1000,
            "buckets": len(histogram.counts)}


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    log(f"per chunk: {args.messages:,} messages x {args.repeats} repeats")
    result = {"per_chunk": asyncio.run(per_chunk(args, log))}
    log(f"per tick: {args.streams} streams x {args.ticks} ticks")
    result["per_tick"] = asyncio.run(per_tick(args, log))
    result["estimator"] = estimator(args)
    return result


def report(result: dict[str, Any]) -> str:
    chunk, tick, est = result["per_chunk"], result["per_tick"], result["estimator"]
    med, added = chunk["median_ns_per_message"], chunk["added_ns_per_message_vs_bare"]
    lines = [
        "| in process (median) | ns / message | added vs bare |",
        "|---|---:|---:|",
        f"| bare | {med['bare']:.0f} | - |",
        *(f"| {k} | {med[k]:.0f} | {added[k]:.0f} |" for k in ("guard", "guard+adaptive")),
        f"\nadaptive on minus off: {chunk['adaptive_minus_guard_ns_per_message']:.0f} ns/message",
        f"\nper tick of {tick['streams']} streams: static "
        f"{tick['median_us_per_tick']['static']:.0f} us, adaptive "
        f"{tick['median_us_per_tick']['adaptive']:.0f} us; adaptive adds "
        f"{tick['adaptive_added_ns_per_stream_per_tick']:.0f} ns per stream per tick = "
        f"{tick['adaptive_added_ns_per_chunk_at_8_chunks_per_tick']:.0f} ns per chunk at 8 "
        "chunks per tick",
        f"estimator: add {est['add_ns']:.0f} ns, P99 over two windows "
        f"{est['p99_two_windows_us']:.0f} us ({est['buckets']} buckets)",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = harness.new_parser("benchmarks.adaptive", __doc__ or "")
    for flag in ("messages", "repeats", "streams", "ticks", "adds"):
        parser.add_argument(f"--{flag}", type=int)
    args = harness.parse(parser, argv, quick={"messages": 20_000, "repeats": 3, "streams": 200,
                                              "ticks": 20, "adds": 20_000},
                         full={"messages": 100_000, "repeats": 9, "streams": 1000,
                               "ticks": 50, "adds": 200_000})
    env = harness.environment(["uvloop"])
    return harness.main("benchmarks.adaptive", argv, args, env, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
