"""Overhead against peers: the guard, BaseHTTPMiddleware and OpenTelemetry on one load.

Run from the repository root (the ``bench`` extra installs OpenTelemetry)::

    python -m benchmarks.peers --json /tmp/bench/peers.json     # 40 clients x 2000 x 32 B
    python -m benchmarks.peers --quick                          # a smoke run, seconds
    python -m benchmarks.plots overhead --from /tmp/bench/peers.json

Four uvicorn servers (``--http httptools``, uvloop) serve the Starlette endpoint of
:mod:`benchmarks.peer_apps`: bare, ``GuardMiddleware`` + ``guard_stream``, the same byte counting
in a ``BaseHTTPMiddleware``, and OpenTelemetry's ASGI middleware. Two clients drive them in turn:

* **server-bound** (``raw``): a minimal HTTP/1.1 client on asyncio streams that counts bytes
  without parsing, so the server, not the client, runs out of CPU;
* **client-bound** (``httpx``): httpx streaming requests (``aiter_raw``), the usual Python
  client, which itself needs more CPU per chunk than the server.

Each round opens ``--clients`` concurrent streams of ``--chunks`` chunks on one server; the
variants alternate within every round (in a rotated order), after one warm-up round each.
Reported per variant: chunks/s (median of rounds), the ratio to bare (median of the per-round
ratios, paired so that drift in host load cancels), the p99 gap between reads that delivered
data (all connections of a round pooled; median of rounds), and the server's CPU per chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

from benchmarks import harness
from benchmarks.harness import Log, cpu_stall_us, fetch_raw, stall_pct
from tests.support.server import ROOT, UvicornServer

VARIANTS = {
    "bare": "benchmarks.peer_apps:bare_app",
    "guard": "benchmarks.peer_apps:guarded_app",
    "basehttp": "benchmarks.peer_apps:basehttp_app",
    "middleware": "benchmarks.peer_apps:middleware_app",
    "otel": "benchmarks.peer_apps:otel_app",
}
LABELS = {
    "bare": "bare app",
    "guard": "GuardMiddleware + guard_stream",
    "basehttp": "BaseHTTPMiddleware (byte counting)",
    "middleware": "GuardMiddleware alone",
    "otel": "OpenTelemetry ASGI middleware",
}
CLIENTS = ("raw", "httpx")


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


async def fetch_httpx(client: Any, url: str, expect: int, gaps: list[float]) -> None:
    """One streaming request through httpx; count body bytes, note read gaps."""
    clock, got, last = time.perf_counter, 0, 0.0
    async with client.stream("GET", url) as response:
        async for part in response.aiter_raw():
            now = clock()
            if last:
                gaps.append(now - last)
            last = now
            got += len(part)
    if response.status_code != 200 or got != expect:
        raise RuntimeError(f"{url}: status {response.status_code}, {got} of {expect} bytes")


async def one_round(kind: str, pool: Any, server: UvicornServer, args: argparse.Namespace,
                    chunks: int) -> dict[str, Any]:
    """``--clients`` concurrent streams on one server; throughput, gaps and CPU."""
    path, expect = f"/stream?n={chunks}&s={args.size}", chunks * args.size
    gaps: list[float] = []
    gc.collect()
    cpu0, stall0 = server.cpu_seconds()[0], cpu_stall_us()
    t0 = time.perf_counter()
    if kind == "raw":
        await asyncio.gather(*(fetch_raw(server.port, path, expect, gaps)
                               for _ in range(args.clients)))
    else:
        await asyncio.gather(*(fetch_httpx(pool, server.url + path, expect, gaps)
                               for _ in range(args.clients)))
    wall = time.perf_counter() - t0
    cpu, total = server.cpu_seconds()[0] - cpu0, args.clients * chunks
    return {
        "wall_s": wall,
        "chunks_per_s": total / wall,
        "p99_gap_ms": 1000 * p99(gaps) if gaps else 0.0,
        "server_cpu_ns_per_chunk": 1e9 * cpu / total,
        "server_cpu_pct": 100 * cpu / wall,
        "host_cpu_stall_pct": stall_pct(stall0, cpu_stall_us(), wall),
    }


async def drive(kind: str, servers: dict[str, UvicornServer], args: argparse.Namespace,
                log: Log) -> dict[str, list[dict[str, Any]]]:
    """Warm-up, then ``--rounds`` rounds in which every variant runs once (rotated order)."""
    pools: dict[str, Any] = dict.fromkeys(servers)
    if kind == "httpx":
        import httpx

        limits = httpx.Limits(max_connections=args.clients,
                              max_keepalive_connections=args.clients)
        pools = {name: httpx.AsyncClient(limits=limits, timeout=120.0, trust_env=False)
                 for name in servers}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    names = list(servers)
    try:
        for name in names:
            await one_round(kind, pools[name], servers[name], args, max(1, args.chunks // 10))
        for i in range(args.rounds):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                result = await one_round(kind, pools[name], servers[name], args, args.chunks)
                rounds[name].append(result)
            log(f"  {kind} round {i + 1}/{args.rounds}: " + "  ".join(
                f"{name} {rounds[name][-1]['chunks_per_s']:,.0f}/s" for name in names))
    finally:
        for pool in pools.values():
            if pool is not None:
                await pool.aclose()
    return rounds


def summarize(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per variant: medians over rounds and the median of per-round ratios to bare."""
    bare = rounds["bare"]
    summary: dict[str, dict[str, Any]] = {}
    for name, results in rounds.items():
        ratios = [r["chunks_per_s"] / b["chunks_per_s"] for r, b in zip(results, bare,
                                                                           strict=True)]
        summary[name] = {
            "chunks_per_s": statistics.median(r["chunks_per_s"] for r in results),
            "ratio_to_bare": statistics.median(ratios),
            "ratios": ratios,
            "p99_gap_ms": statistics.median(r["p99_gap_ms"] for r in results),
            "server_cpu_ns_per_chunk": statistics.median(
                r["server_cpu_ns_per_chunk"] for r in results),
            "server_cpu_pct": statistics.median(r["server_cpu_pct"] for r in results),
        }
    return summary


def _server(name: str, args: argparse.Namespace) -> UvicornServer:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_GUARD_")}
    return UvicornServer(VARIANTS[name], env=env, name=f"peers-{name}",
                         args=("--http", "httptools", "--loop", "uvloop", "--no-access-log",
                               "--timeout-keep-alive", "120", "--app-dir", str(ROOT)))


async def _guard_status(server: UvicornServer) -> dict[str, Any]:
    import httpx

    async with httpx.AsyncClient(trust_env=False) as client:
        doc = (await client.get(server.url + "/llm-guard/status")).json()
    return {"sessions_opened_total": doc["sessions"]["opened_total"],
            "streams_completed_total": doc["streams"]["completed_total"],
            "streams_open": doc["streams"]["open"],
            "internal_errors_total": doc["errors"]["internal_total"]}


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    servers = {name: _server(name, args) for name in args.variants}
    result: dict[str, Any] = {"clients": {}}
    try:
        for server in servers.values():
            server.start(timeout=60)
        for kind in args.client:
            log(f"{kind} client: {args.clients} clients x {args.chunks} chunks x {args.size} B, "
                f"{args.rounds} rounds")
            rounds = asyncio.run(drive(kind, servers, args, log))
            result["clients"][kind] = {"rounds": rounds, "summary": summarize(rounds)}
        if "guard" in servers:
            result["guard_status_after"] = asyncio.run(_guard_status(servers["guard"]))
    finally:
        for server in servers.values():
            server.stop()
    return result


def markdown(result: dict[str, Any]) -> str:
    cfg, lines = result["config"], []
    for kind, data in result["clients"].items():
        bound = "server-bound, raw-socket client" if kind == "raw" else "client-bound, httpx"
        lines += [
            f"{bound}: {cfg['clients']} clients x {cfg['chunks']} chunks x {cfg['size']} B, "
            f"{cfg['rounds']} rounds (variants alternating)",
            "",
            "| variant | chunks/s | ratio to bare | p99 read gap, ms | server CPU ns/chunk |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, s in data["summary"].items():
            lines.append(f"| {LABELS[name]} | {s['chunks_per_s']:,.0f} | "
                         f"**{s['ratio_to_bare']:.3f}** | {s['p99_gap_ms']:.2f} | "
                         f"{s['server_cpu_ns_per_chunk']:,.0f} |")
        lines.append("")
    status = result.get("guard_status_after")
    if status is not None:
        lines.append(f"Guarded server afterwards: {status}")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = harness.new_parser("benchmarks.peers", __doc__ or "")
    parser.add_argument("--clients", type=int, help="concurrent streams per round (40)")
    parser.add_argument("--chunks", type=int, help="chunks per stream (2000)")
    parser.add_argument("--size", type=int, default=32, help="bytes per chunk (32)")
    parser.add_argument("--rounds", type=int, help="timed rounds per client kind (5)")
    parser.add_argument("--client", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    parser.add_argument("--variants", nargs="+", choices=tuple(VARIANTS),
                        default=["bare", "guard", "basehttp", "otel"],
                        help="servers to compare (default: bare guard basehttp otel; "
                             "'middleware' is GuardMiddleware without guard_stream)")
    args = harness.parse(parser, argv,
                         quick={"clients": 8, "chunks": 200, "rounds": 2},
                         full={"clients": 40, "chunks": 2000, "rounds": 5})
    if "bare" not in args.variants:
        parser.error("--variants must include bare (ratios are to bare)")
    if min(args.clients, args.chunks, args.rounds, args.size) < 1:
        parser.error("--clients, --chunks, --rounds and --size must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    env = harness.environment(("uvicorn", "httpx", "httptools", "uvloop", "starlette",
                               "opentelemetry-sdk", "opentelemetry-instrumentation-asgi"))
    return harness.main("benchmarks.peers", argv, args, env, run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
