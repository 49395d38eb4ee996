"""Guard overhead: what GuardMiddleware + guard_stream cost a streaming endpoint.

Run from the repository root::

    python -m benchmarks.overhead                 # defaults: 200 clients x 1000 chunks x 32 B
    python -m benchmarks.overhead --quick         # 50 x 200, 3 rounds
    python -m benchmarks.overhead --json out.json

Two measurements, in one run:

1. **End to end.** Two uvicorn subprocesses on 127.0.0.1 serve the same pure-ASGI streaming
   endpoint, which sends ``--chunks`` body messages of ``--size`` bytes with no sleeps:
   ``bare_app`` as is, ``guarded_app`` wrapped in ``GuardMiddleware`` with the body generator
   wrapped in ``guard_stream`` (the realistic setup). One client process with ``--clients``
   concurrent httpx streaming requests (``aiter_raw``, counting bytes only) drives them, bare and
   guarded alternately for ``--rounds`` rounds. Throughput is min(server, client): on a small
   machine the Python client may be the bottleneck, so the CPU each side used per round is
   recorded too (server CPU time per chunk is the end-to-end cost that does not depend on which
   side was saturated).
2. **In process.** The same ASGI apps driven directly with a fake ``receive`` and a counting
   ``send`` (no server, no sockets), to isolate the nanoseconds the guard adds per ASGI message,
   plus the fixed cost it adds per request.

The endpoint is pure ASGI on purpose: a framework (FastAPI/Starlette) adds its own per-message
cost, which would make the guard's share look smaller than it is.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import parse_qs

from benchmarks import harness
from benchmarks.harness import Log, cpu_stall_us, fetch_raw, fmt_pct, median_or_none, stall_pct
from llm_guard_sdk import GuardConfig, GuardMiddleware, guard_stream
from tests.support.asgi import SendRecorder, http_scope, receive_request, serve_lifespan
from tests.support.server import ROOT, UvicornServer

# Longer than the house ~300 lines on purpose: one benchmark is read as one file (the apps under
# test, both measurements and their report), so a reader can check what is measured without
# chasing modules; what the benchmarks share lives in benchmarks/harness.py and
# tests/support/server.py.
Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/octet-stream")],
}
_END = {"type": "http.response.body", "body": b"", "more_body": False}


# -- the apps under test ----------------------------------------------------------------------


async def _chunks(count: int, size: int) -> AsyncIterator[bytes]:
    """The 'model': yields ``count`` chunks of ``size`` bytes as fast as it is consumed."""
    chunk = b"x" * size
    for _ in range(count):
        yield chunk


def _params(scope: Scope) -> tuple[int, int]:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    return int(query.get("n", ["1000"])[0]), int(query.get("s", ["32"])[0])


def _make_app(*, guarded_stream: bool) -> App:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        count, size = _params(scope)
        body: AsyncIterator[bytes] = _chunks(count, size)
        if guarded_stream:
            body = guard_stream(body, name="bench")
        await send(_START)
        async for chunk in body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send(_END)

    return app


def _guard_config() -> GuardConfig:
    return GuardConfig.defaults(sources=("process",))


#: The endpoint with nothing around it.
bare_app = _make_app(guarded_stream=False)
#: The realistic guarded setup: middleware around the app, guard_stream around the generator.
guarded_app = GuardMiddleware(_make_app(guarded_stream=True), config=_guard_config())


# -- end to end -------------------------------------------------------------------------------


async def _fetch(client: Any, url: str, expect: int) -> None:
    got = 0
    async with client.stream("GET", url) as response:
        async for part in response.aiter_raw():
            got += len(part)
    if response.status_code != 200 or got != expect:
        raise RuntimeError(f"{url}: status {response.status_code}, {got} of {expect} bytes")




async def _round(
    client: Any, server: UvicornServer, clients: int, chunks: int, size: int
) -> dict[str, Any]:
    path = f"/stream?n={chunks}&s={size}"
    gc.collect()
    cpu_server0, cpu_client0 = server.cpu_seconds()[0], time.process_time()
    stall0 = cpu_stall_us()
    t0 = time.perf_counter()
    if client is None:
        await asyncio.gather(
            *(fetch_raw(server.port, path, chunks * size) for _ in range(clients))
        )
    else:
        url = server.url + path
        await asyncio.gather(*(_fetch(client, url, chunks * size) for _ in range(clients)))
    wall = time.perf_counter() - t0
    cpu_server = server.cpu_seconds()[0] - cpu_server0
    cpu_client = time.process_time() - cpu_client0
    stall1 = cpu_stall_us()
    total = clients * chunks
    return {
        "wall_s": wall,
        "chunks": total,
        "chunks_per_s": total / wall,
        "server_cpu_pct": 100 * cpu_server / wall,
        "client_cpu_pct": 100 * cpu_client / wall,
        "server_cpu_ns_per_chunk": 1e9 * cpu_server / total,
        # Share of the round in which some task on the host waited for a CPU (contention).
        "host_cpu_stall_pct": stall_pct(stall0, stall1, wall),
    }


async def _guard_status(client: Any, server: UvicornServer) -> dict[str, Any]:
    response = await client.get(f"{server.url}/llm-guard/status")
    doc = response.json()
    return {
        "sessions_opened_total": doc["sessions"]["opened_total"],
        "sessions_active": doc["sessions"]["active"],
        "streams_completed_total": doc["streams"]["completed_total"],
        "streams_open": doc["streams"]["open"],
        "internal_errors_total": doc["errors"]["internal_total"],
        "level": doc["level"],
    }


async def _end_to_end_async(
    servers: dict[str, UvicornServer], args: argparse.Namespace, log: Log
) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    timeout = httpx.Timeout(120.0)
    pools: dict[str, Any] = {
        name: httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False)
        if args.client == "httpx"
        else None
        for name in servers
    }
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
    try:
        # Warm-up: open every keep-alive connection and warm both servers; not counted.
        for name, server in servers.items():
            await _round(pools[name], server, args.clients, max(1, args.chunks // 10), args.size)
        for i in range(args.rounds):
            for name, server in servers.items():  # A B A B ...
                result = await _round(pools[name], server, args.clients, args.chunks, args.size)
                rounds[name].append(result)
                log(
                    f"  round {i + 1}/{args.rounds} {name:<8} {result['chunks_per_s']:>10,.0f} "
                    f"chunks/s  server CPU {result['server_cpu_pct']:3.0f}%  "
                    f"client CPU {result['client_cpu_pct']:3.0f}%  "
                    f"server {result['server_cpu_ns_per_chunk']:,.0f} ns/chunk  "
                    f"host CPU stall {fmt_pct(result['host_cpu_stall_pct'])}"
                )
        async with httpx.AsyncClient(trust_env=False) as client:
            status = await _guard_status(client, servers["guarded"])
    finally:
        for pool in pools.values():
            if pool is not None:
                await pool.aclose()
    bare, guarded = rounds["bare"], rounds["guarded"]
    ratios = [g["chunks_per_s"] / b["chunks_per_s"] for b, g in zip(bare, guarded, strict=True)]
    cpu_ratios = [
        g["server_cpu_ns_per_chunk"] / b["server_cpu_ns_per_chunk"]
        for b, g in zip(bare, guarded, strict=True)
    ]

    def med(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in rounds[name]))

    return {
        "rounds": rounds,
        "median_chunks_per_s": {
            "bare": med("bare", "chunks_per_s"),
            "guarded": med("guarded", "chunks_per_s"),
        },
        "median_ratio": statistics.median(ratios),
        "ratios": ratios,
        "median_server_cpu_ns_per_chunk": {
            "bare": med("bare", "server_cpu_ns_per_chunk"),
            "guarded": med("guarded", "server_cpu_ns_per_chunk"),
        },
        "median_server_cpu_ratio": statistics.median(cpu_ratios),
        "median_server_cpu_pct": {
            "bare": med("bare", "server_cpu_pct"),
            "guarded": med("guarded", "server_cpu_pct"),
        },
        "median_client_cpu_pct": {
            "bare": med("bare", "client_cpu_pct"),
            "guarded": med("guarded", "client_cpu_pct"),
        },
        "median_host_cpu_stall_pct": median_or_none(
            r["host_cpu_stall_pct"] for rs in rounds.values() for r in rs
        ),
        "guard_status_after": status,
        "saturated": _saturation(rounds),
    }


def _saturation(rounds: dict[str, list[dict[str, Any]]]) -> str:
    """A hint, not a proof: which process ran near a full core during the timed rounds."""
    server = statistics.median(r["server_cpu_pct"] for rs in rounds.values() for r in rs)
    client = statistics.median(r["client_cpu_pct"] for rs in rounds.values() for r in rs)
    busy = [name for name, pct in (("server", server), ("client", client)) if pct >= 90]
    if not busy:
        return (
            f"neither (server {server:.0f}%, client {client:.0f}% of a core): "
            "CPU contention on the host is likely"
        )
    return (
        " and ".join(busy) + f" (server {server:.0f}%, client {client:.0f}% of a core); "
        "which side limited throughput is not certain"
    )


def _server(target: str, args: argparse.Namespace) -> UvicornServer:
    """A uvicorn serving ``target`` with the benchmark's HTTP and loop, no LLM_GUARD_* env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_GUARD_")}
    return UvicornServer(
        target,
        env=env,
        name=target.rsplit(":", 1)[1],
        args=("--http", args.http, "--loop", args.loop, "--no-access-log",
              "--timeout-keep-alive", "120", "--app-dir", str(ROOT)),
    )


def run_end_to_end(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    servers = {
        "bare": _server("benchmarks.overhead:bare_app", args),
        "guarded": _server("benchmarks.overhead:guarded_app", args),
    }
    try:
        for server in servers.values():
            server.start(timeout=30)
        return asyncio.run(_end_to_end_async(servers, args, log))
    finally:
        for server in servers.values():
            server.stop()


# -- in process -------------------------------------------------------------------------------


def _scope(chunks: int, size: int) -> Scope:
    return http_scope("/stream", query_string=f"n={chunks}&s={size}".encode(),
                      headers=[(b"host", b"bench")], client=("127.0.0.1", 40000),
                      server=("127.0.0.1", 8000))


async def _drive(app: App, scope: Scope) -> tuple[int, int]:
    """One request through ``app``: returns (elapsed ns, messages sent).

    The client never leaves (``receive`` waits after the request); the guard's pump is
    cancelled when the app returns.
    """
    send = SendRecorder(keep=False)
    t0 = time.perf_counter_ns()
    await app(scope, receive_request(), send)
    return time.perf_counter_ns() - t0, send.count


async def _in_process_async(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    middleware_only = GuardMiddleware(_make_app(guarded_stream=False), config=_guard_config())
    full = GuardMiddleware(_make_app(guarded_stream=True), config=_guard_config())
    variants: dict[str, App] = {
        "bare": _make_app(guarded_stream=False),
        "middleware": middleware_only,
        "middleware+guard_stream": full,
    }
    n = args.messages
    long_scope, short_scope = _scope(n, args.size), _scope(1, args.size)
    per_message: dict[str, list[float]] = {name: [] for name in variants}
    per_request: dict[str, list[float]] = {name: [] for name in variants}
    for app in variants.values():  # warm-up (and start the guards' samplers)
        await _drive(app, _scope(1000, args.size))
    for i in range(args.repeats):
        for name, app in variants.items():  # alternate the variants within each repeat
            gc.collect()
            elapsed, sent = await _drive(app, long_scope)
            if sent != n + 2:
                raise RuntimeError(f"{name}: sent {sent} messages, expected {n + 2}")
            per_message[name].append(elapsed / sent)
            gc.collect()
            t0 = time.perf_counter_ns()
            for _ in range(args.requests):
                await _drive(app, short_scope)
            per_request[name].append((time.perf_counter_ns() - t0) / args.requests)
        log(
            "  repeat {}/{}: {}".format(
                i + 1,
                args.repeats,
                "  ".join(f"{name} {per_message[name][-1]:.0f} ns/msg" for name in variants),
            )
        )
    guards = [middleware_only.guard, full.guard]
    leftover = sum(len(g.registry) for g in guards)
    errors = sum(g.internal_errors_total for g in guards)
    for guard in guards:
        await guard.stop()
    med_msg = {name: statistics.median(v) for name, v in per_message.items()}
    med_req = {name: statistics.median(v) for name, v in per_request.items()}
    return {
        "messages_per_request": n + 2,
        "median_ns_per_message": med_msg,
        # Median of the per-repeat differences (each repeat runs the variants back to back).
        "added_ns_per_message": {
            name: statistics.median(
                g - b for g, b in zip(per_message[name], per_message["bare"], strict=True)
            )
            for name in variants
            if name != "bare"
        },
        "min_ns_per_message": {name: min(v) for name, v in per_message.items()},
        "samples_ns_per_message": per_message,
        "median_us_per_short_request": {k: v / 1000 for k, v in med_req.items()},
        "added_us_per_request": {
            name: statistics.median(
                g - b for g, b in zip(per_request[name], per_request["bare"], strict=True)
            )
            / 1000
            for name in variants
            if name != "bare"
        },
        "sessions_left_open": leftover,
        "internal_errors_total": errors,
    }


def _loop_factory(loop: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    if loop in ("uvloop", "auto"):
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise
            return None
        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        return factory
    return None


def run_in_process(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    with asyncio.Runner(loop_factory=_loop_factory(args.loop)) as runner:
        return runner.run(_in_process_async(args, log))


# -- report -----------------------------------------------------------------------------------


def _environment(args: argparse.Namespace) -> dict[str, Any]:
    loop = "uvloop" if _loop_factory(args.loop) is not None else "asyncio"
    return harness.environment(("uvicorn", "httpx", "httptools", "uvloop"), loop=loop,
                               http=args.http)


def markdown(result: dict[str, Any]) -> str:
    """The results as a markdown table (what docs/benchmarks.md quotes)."""
    cfg, lines = result["config"], []
    e2e = result.get("end_to_end")
    if e2e is not None:
        tp, cpu = e2e["median_chunks_per_s"], e2e["median_server_cpu_ns_per_chunk"]
        lines += [
            f"End to end: {cfg['clients']} clients x {cfg['chunks']} chunks x {cfg['size']} B, "
            f"{cfg['rounds']} rounds (bare/guarded alternating), {cfg['client']} client, "
            f"uvicorn --http {cfg['http']}, "
            f"loop {result['environment']['loop']}; near a full core: {e2e['saturated']}; "
            f"host CPU stall (PSI) {fmt_pct(e2e['median_host_cpu_stall_pct'])} of the time.",
            "",
            "| end to end (median of rounds) | bare | guarded | guarded/bare |",
            "|---|---:|---:|---:|",
            f"| throughput, chunks/s | {tp['bare']:,.0f} | {tp['guarded']:,.0f} "
            f"| **{e2e['median_ratio']:.3f}** (median of per-round ratios; target >= 0.98) |",
            f"| server CPU per chunk, ns | {cpu['bare']:,.0f} | {cpu['guarded']:,.0f} "
            f"| {e2e['median_server_cpu_ratio']:.3f} (median of per-round ratios) |",
            f"| server CPU, % of a core | {e2e['median_server_cpu_pct']['bare']:.0f} "
            f"| {e2e['median_server_cpu_pct']['guarded']:.0f} | |",
            f"| client CPU, % of a core | {e2e['median_client_cpu_pct']['bare']:.0f} "
            f"| {e2e['median_client_cpu_pct']['guarded']:.0f} | |",
            "",
        ]
    inp = result.get("in_process")
    if inp is not None:
        ns, req = inp["median_ns_per_message"], inp["median_us_per_short_request"]
        lines += [
            f"In process: {inp['messages_per_request']:,} ASGI messages per request, "
            f"{cfg['repeats']} repeats alternating; per-request cost from {cfg['requests']} "
            "one-chunk requests per repeat.",
            "",
            "| in process (median) | ns / message | added ns / message (target <= 1000)\u00b9 "
            "| us / one-chunk request | added us / request |",
            "|---|---:|---:|---:|---:|",
            f"| bare app | {ns['bare']:,.0f} | - | {req['bare']:,.1f} | - |",
        ]
        for name in ("middleware", "middleware+guard_stream"):
            label = "GuardMiddleware" if name == "middleware" else "GuardMiddleware + guard_stream"
            lines.append(
                f"| {label} | {ns[name]:,.0f} | **{inp['added_ns_per_message'][name]:,.0f}** "
                f"| {req[name]:,.1f} | {inp['added_us_per_request'][name]:,.1f} |"
            )
        lines += [
            "",
            "\u00b9 median of the per-repeat differences from the bare app (paired, so drift in "
            "host load cancels); ns / message is the median over repeats.",
            "",
        ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = harness.new_parser("benchmarks.overhead", __doc__ or "")
    parser.add_argument("--clients", type=int, help="concurrent streaming clients (200)")
    parser.add_argument("--chunks", type=int, help="chunks per response (1000)")
    parser.add_argument("--size", type=int, default=32, help="bytes per chunk (32)")
    parser.add_argument("--rounds", type=int, help="end-to-end rounds per server (5)")
    parser.add_argument("--messages", type=int, help="in-process messages per request (100000)")
    parser.add_argument("--repeats", type=int, help="in-process repeats (9)")
    parser.add_argument("--requests", type=int, help="in-process one-chunk requests (2000)")
    parser.add_argument(
        "--client",
        choices=("httpx", "raw"),
        default="httpx",
        help="httpx streaming clients (default) or a minimal raw-socket client",
    )
    parser.add_argument("--http", choices=("httptools", "h11"), default="httptools")
    parser.add_argument("--loop", choices=("auto", "uvloop", "asyncio"), default="auto")
    parser.add_argument("--skip-e2e", action="store_true", help="in-process part only")
    parser.add_argument("--skip-in-process", action="store_true", help="end-to-end part only")
    args = harness.parse(
        parser,
        argv,
        quick={"clients": 50, "chunks": 200, "rounds": 3, "messages": 20_000, "repeats": 7,
               "requests": 500},
        full={"clients": 200, "chunks": 1000, "rounds": 5, "messages": 100_000, "repeats": 9,
              "requests": 2000},
    )
    if args.repeats < 1 or args.rounds < 1 or args.clients < 1 or args.chunks < 1:
        parser.error("--rounds, --repeats, --clients and --chunks must be >= 1")
    return args


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    """The end-to-end part, then the in-process part (unless skipped)."""
    result: dict[str, Any] = {}
    if not args.skip_e2e:
        log(
            f"end to end: {args.clients} clients x {args.chunks} chunks x {args.size} B, "
            f"{args.rounds} rounds"
        )
        result["end_to_end"] = run_end_to_end(args, log)
    if not args.skip_in_process:
        log(f"in process: {args.messages:,} messages x {args.repeats} repeats")
        result["in_process"] = run_in_process(args, log)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return harness.main("benchmarks.overhead", argv, args, _environment(args), run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
