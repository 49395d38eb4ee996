"""Leak tools: what the pytest plugin and the runtime sweeper cost.

Run from the repository root::

    python -m benchmarks.leaks                  # defaults below
    python -m benchmarks.leaks --quick          # fewer tests and repeats
    python -m benchmarks.leaks --json out.json

Three measurements:

1. **Plugin disabled.** A generated module of ``--trivial`` trivial tests runs in a pytest
   subprocess three ways: plugin blocked (``-p no:llm_guard``, as if not installed), installed but
   off (the default), and ``--llm-guard-leaks``. Per-test cost comes from pytest's own session
   time ("passed in X s", which excludes interpreter start and imports); the one-time cost of
   loading the plugin from the wall time of the whole subprocess.
2. **Plugin enabled on a typical async test.** ``--async-tests`` pytest-asyncio tests, each one
   request through ``GuardMiddleware`` with an attached context and a guarded token stream, run
   off and on; the difference per test is what the check adds.
3. **Runtime sweeper.** N sessions (each with an attachment and a consumed guarded stream: four
   tracked objects) are closed, then one sweep scans them all past their grace; repeated for
   1,000 and 10,000 sessions. Also: the close hook's cost per session (request path), a sweep
   with nothing due, and one confirmed leak's forensics (collection, chain, size).

4. **Reference-chain search at a real heap size** (last, in this process: it imports vLLM and
   torch, then pads the heap with small app-like objects up to ``--chain-objects``, ~600k by
   default). A target sits ``depth`` references below a fresh module, 6 and 10, behind a fan-in
   of ``--chain-fan`` holders per level (objects are rarely held from one place only), and
   ``search`` is timed; objgraph's ``find_backref_chain`` (one heap scan per visited object,
   the search used before) is timed once at depth 6 for comparison. ``--only chains`` runs
   just this part.

Each subprocess variant runs ``--repeats`` times, interleaved; medians are reported. (Over 300
lines: one module per benchmark script is the house layout of ``benchmarks/``.)
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import importlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from llm_guard_sdk import CloseReason, Guard, GuardConfig, guard_stream
from llm_guard_sdk.leaks import LeakSweeper, enable_leak_sweeper
from llm_guard_sdk.leaks.deps import load_objgraph
from llm_guard_sdk.leaks.runtime.chains import is_root, search

ROOT = Path(__file__).resolve().parent.parent
INI = """[pytest]
addopts = -p no:cacheprovider -q
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
"""
TRIVIAL = """
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_trivial(i):
    assert i >= 0
"""
TYPICAL = '''
import pytest
from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware, current_session, guard_stream

GUARD = Guard(GuardConfig.defaults(sources=("process",)))

class Context:
    def __init__(self, prompt):
        self.prompt = prompt
        self.history = [prompt] * 50

async def tokens(ctx):
    for word in ctx.prompt.split():
        yield word.encode()

async def chat(scope, receive, send):
    ctx = current_session().attach(Context("the quick brown fox jumps"))
    await send({{"type": "http.response.start", "status": 200, "headers": []}})
    async for chunk in guard_stream(tokens(ctx)):
        await send({{"type": "http.response.body", "body": chunk, "more_body": True}})
    await send({{"type": "http.response.body", "body": b""}})

APP = GuardMiddleware(chat, guard=GUARD)

async def request(path="/chat"):
    sent = []
    async def receive():
        return {{"type": "http.request", "body": b"", "more_body": False}}
    async def send(message):
        sent.append(message)
    scope = {{"type": "http", "method": "GET", "path": path, "query_string": b"",
              "headers": [], "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80)}}
    await APP(scope, receive, send)
    return sent

@pytest.mark.parametrize("i", range({n}))
@pytest.mark.asyncio
async def test_chat(i):
    sent = await request()
    assert sent[0]["status"] == 200 and len(sent) == 7
'''
_IN = re.compile(r"passed in ([\d.]+)s")


def _pytest(directory: Path, extra: list[str]) -> tuple[float, float]:
    """Run pytest once; (session seconds as pytest reports them, subprocess wall seconds)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", *extra], cwd=directory,
                          capture_output=True, text=True, timeout=900, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - start
    match = _IN.search(done.stdout)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"pytest {extra} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return float(match.group(1)), wall


def run_variants(source: str, tests: int, variants: dict[str, list[str]], repeats: int,
                 log: Callable[[str], None]) -> dict[str, Any]:
    """Median session/wall seconds of each pytest variant over interleaved repeats."""
    with tempfile.TemporaryDirectory(prefix="llm-guard-bench-") as tmp:
        directory = Path(tmp)
        (directory / "pytest.ini").write_text(INI)
        (directory / "test_bench.py").write_text(source.format(n=tests))
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        _pytest(directory, variants[next(iter(variants))])  # warm the disk cache and .pyc
        for round_ in range(repeats):
            for name, extra in variants.items():
                samples[name].append(_pytest(directory, extra))
            log(f"  round {round_ + 1}/{repeats}: " + ", ".join(
                f"{n} {s[-1][0]:.2f}s" for n, s in samples.items()))
    return {name: {"session_s": statistics.median(s for s, _ in runs),
                   "wall_s": statistics.median(w for _, w in runs),
                   "session_samples_s": [s for s, _ in runs]}
            for name, runs in samples.items()}


def plugin_import_ms(repeats: int) -> float:
    """Median cumulative import time of the plugin module, pytest/asyncio/anyio already loaded
    (as in a pytest session with pytest-asyncio or anyio), from ``python -X importtime``."""
    code = "import pytest, asyncio, anyio; import llm_guard_sdk.pytest_plugin"
    times = []
    for _ in range(repeats):
        err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=ROOT,
                             capture_output=True, text=True, check=True, timeout=120).stderr
        line = next(x for x in err.splitlines() if x.endswith("| llm_guard_sdk.pytest_plugin"))
        times.append(int(line.split("|")[1]) / 1000)
    return statistics.median(times)


def bench_plugin(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    log(f"plugin disabled: {args.trivial} trivial tests x {args.repeats} rounds")
    trivial = run_variants(TRIVIAL, args.trivial, {
        "not_loaded": ["-p", "no:llm_guard"], "installed_off": [],
        "enabled": ["--llm-guard-leaks"]}, args.repeats, log)
    n = args.trivial
    base = trivial["not_loaded"]
    off = trivial["installed_off"]
    log(f"typical async test: {args.async_tests} tests x {args.repeats} rounds")
    typical = run_variants(TYPICAL, args.async_tests, {
        "off": [], "enabled": ["--llm-guard-leaks"]}, args.repeats, log)
    m = args.async_tests
    return {
        "trivial": trivial,
        "trivial_tests": n,
        "off_us_per_test": (off["session_s"] - base["session_s"]) / n * 1e6,
        "enabled_us_per_trivial_test": (trivial["enabled"]["session_s"] - base["session_s"])
        / n * 1e6,
        "plugin_load_ms_per_session": (off["wall_s"] - base["wall_s"]) * 1e3,
        "plugin_import_ms": plugin_import_ms(args.repeats),
        "typical": typical,
        "typical_tests": m,
        "typical_off_ms_per_test": typical["off"]["session_s"] / m * 1e3,
        "enabled_ms_per_typical_test": (typical["enabled"]["session_s"]
                                        - typical["off"]["session_s"]) / m * 1e3,
    }


# -- runtime sweeper -------------------------------------------------------------------------


class Context:
    def __init__(self) -> None:
        self.history = ["hello"] * 20


async def _tokens() -> AsyncIterator[str]:
    yield "a"


async def _serve(guard: Guard, n: int) -> float:
    """Open and close ``n`` sessions like a streaming endpoint; returns seconds spent."""
    start = time.perf_counter()
    for _ in range(n):
        session = guard.registry.open("http", "/chat")
        session.attach(Context())
        async for _ in guard_stream(_tokens(), session=session):
            pass
        await guard.close_session(session, CloseReason.COMPLETED)
    return time.perf_counter() - start


async def _sweeper_async(sizes: list[int], repeats: int, log: Callable[[str], None]
                         ) -> dict[str, Any]:
    out: dict[str, Any] = {"sizes": {}}
    for n in sizes:
        scans, with_hooks, without_hooks = [], [], []
        for _ in range(repeats):
            plain = Guard(GuardConfig.defaults(sources=("process",)))
            without_hooks.append(await _serve(plain, n))
            guard = Guard(GuardConfig.defaults(sources=("process",)))
            sweeper = enable_leak_sweeper(guard, grace=0)
            with_hooks.append(await _serve(guard, n))
            assert sweeper.tracked == n
            start = time.perf_counter()
            suspects = sweeper.scan(time.monotonic() + 3600)
            scans.append(time.perf_counter() - start)
            assert suspects == 0 and sweeper.tracked == 0
        sweep_ms = statistics.median(scans) * 1e3
        hook_us = (statistics.median(with_hooks) - statistics.median(without_hooks)) / n * 1e6
        out["sizes"][str(n)] = {"sweep_ms": sweep_ms, "sweep_ms_per_1000": sweep_ms * 1000 / n,
                                "close_hooks_us_per_session": hook_us,
                                "records_per_session": 4}
        log(f"  {n} closed sessions: sweep {sweep_ms:.3f} ms, hooks {hook_us:.2f} us/session")
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    sweeper = enable_leak_sweeper(guard, grace=3600)
    await _serve(guard, 1000)
    start = time.perf_counter()
    for _ in range(1000):
        sweeper.scan()
    out["idle_sweep_us"] = (time.perf_counter() - start) / 1000 * 1e6
    return out


_KEEP: list[Any] = []


def _one_leak(log: Callable[[str], None]) -> float:
    async def leak() -> LeakSweeper:
        guard = Guard(GuardConfig.defaults(sources=("process",)))
        sweeper = enable_leak_sweeper(guard, graphs=0, grace=0)
        session = guard.registry.open("http", "/chat")
        _KEEP.append(session.attach(Context()))
        await guard.close_session(session, CloseReason.COMPLETED)
        return sweeper

    sweeper = asyncio.run(leak())
    start = time.perf_counter()
    (report,) = sweeper.sweep(time.monotonic() + 3600)
    elapsed = (time.perf_counter() - start) * 1e3
    log(f"  one confirmed leak: {elapsed:.1f} ms (collect + chain + size): "
        f"{report['chain']['text']}")
    _KEEP.clear()
    return elapsed


def bench_sweeper(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    log(f"runtime sweeper: {args.sizes} closed sessions x {args.repeats} repeats")
    out = asyncio.run(_sweeper_async(args.sizes, args.repeats, log))
    out["forensics_ms_per_leak"] = _one_leak(log)
    return out


# -- chain search at a real heap size ---------------------------------------------------------

class _Filler:
    """A small app-like object (instance dict, one reference) to pad the heap."""

    def __init__(self, value: object) -> None:
        self.value = value


def _plant(depth: int, fan: int) -> tuple[types.ModuleType, object]:
    """A fresh module ``depth`` references above a target; ``fan`` holders at each level."""
    target: object = Context()
    level: list[list[object]] = [[target] for _ in range(fan)]  # level 1: fan lists hold it
    for _ in range(depth - 3):  # module -> its dict -> HEAD list -> ... -> level 1 -> target
        level = [list(level) for _ in range(fan)]
    module = types.ModuleType(f"bench_leaky_{depth}")
    module.HEAD = level[0]  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module, target


def bench_chains(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    start = time.perf_counter()
    for name in ("vllm", "torch"):
        importlib.import_module(name)
    out: dict[str, Any] = {"import_s": time.perf_counter() - start}
    gc.collect()
    out["objects_imported"] = len(gc.get_objects())
    padding = [_Filler(i) for i in range(max(0, args.chain_objects - out["objects_imported"]))]
    gc.collect()
    out["objects"] = len(gc.get_objects())
    one = object()
    scans = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        gc.get_referrers(one)
        scans.append(time.perf_counter() - t)
    out["one_scan_ms"] = statistics.median(scans) * 1e3
    log(f"chain search: {out['objects']} objects ({out['objects_imported']} after importing "
        f"vllm and torch), one gc.get_referrers {out['one_scan_ms']:.0f} ms")
    for depth in (6, 10):
        module, target = _plant(depth, args.chain_fan)
        gc.collect()
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            found, chain = search(target, max_depth=12)
            times.append(time.perf_counter() - t)
            assert len(found) == depth + 1 and found[0] is module, chain.text
            del found
        out[f"depth_{depth}_ms"] = statistics.median(times) * 1e3
        log(f"  depth {depth}: {out[f'depth_{depth}_ms']:.0f} ms ({chain.text[:70]}…)")
        objgraph = load_objgraph()
        if depth == 6 and objgraph is not None:
            t = time.perf_counter()
            old = objgraph.find_backref_chain(target, is_root, max_depth=12)
            out["objgraph_depth_6_ms"] = (time.perf_counter() - t) * 1e3
            assert len(old) == depth + 1
            del old
            log(f"  depth 6, objgraph find_backref_chain: {out['objgraph_depth_6_ms']:.0f} ms")
        del sys.modules[module.__name__], module, target
    out["fan"] = args.chain_fan
    del padding
    return out


def report(results: dict[str, Any]) -> str:
    lines = []
    if "plugin" in results:
        lines.extend(_report_plugin(results["plugin"]))
    if "sweeper" in results:
        lines.extend(_report_sweeper(results["sweeper"]))
    if "chains" in results:
        c = results["chains"]
        lines.append(f"chain search, {c['objects']} objects (fan-in {c['fan']}; one heap scan "
                     f"{c['one_scan_ms']:.0f} ms): depth 6 {c['depth_6_ms']:.0f} ms, depth 10 "
                     f"{c['depth_10_ms']:.0f} ms; objgraph at depth 6 "
                     f"{c.get('objgraph_depth_6_ms', float('nan')):.0f} ms")
    return "\n".join(lines)


def _report_plugin(p: dict[str, Any]) -> list[str]:
    return [
        "plugin disabled (installed, not asked): "
        f"{p['off_us_per_test']:+.1f} us per test vs not loaded "
        f"({p['trivial_tests']} trivial tests); once per session: import "
        f"{p['plugin_import_ms']:.0f} ms (importtime), {p['plugin_load_ms_per_session']:+.0f} ms "
        "wall",
        f"plugin enabled, trivial test: {p['enabled_us_per_trivial_test']:+.1f} us per test",
        f"plugin enabled, typical async test: {p['enabled_ms_per_typical_test']:+.2f} ms per test "
        f"(test itself {p['typical_off_ms_per_test']:.2f} ms; target <= 50 ms)",
    ]


def _report_sweeper(s: dict[str, Any]) -> list[str]:
    lines = []
    for n, row in s["sizes"].items():
        lines.append(f"sweeper, {n} closed sessions: {row['sweep_ms']:.3f} ms per sweep "
                     f"({row['sweep_ms_per_1000']:.3f} ms per 1,000; target <= 1 ms); close hooks "
                     f"{row['close_hooks_us_per_session']:.2f} us per session")
    lines.append(f"sweeper, nothing due: {s['idle_sweep_us']:.2f} us per sweep; one confirmed "
                 f"leak's forensics: {s['forensics_ms_per_leak']:.1f} ms")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trivial", type=int, default=2000, help="trivial tests (2000)")
    parser.add_argument("--async-tests", type=int, default=300, help="typical async tests (300)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=5, help="rounds per variant (5)")
    parser.add_argument("--quick", action="store_true", help="500 / 100 tests, 3 rounds")
    parser.add_argument("--json", type=Path, default=None, help="write results here")
    parser.add_argument("--chain-objects", type=int, default=600_000,
                        help="heap size for the chain search, padded after importing vllm "
                             "and torch (600000)")
    parser.add_argument("--chain-fan", type=int, default=8, help="holders per level (8)")
    parser.add_argument("--only", choices=("plugin", "sweeper", "chains"), nargs="+",
                        default=["plugin", "sweeper", "chains"], help="parts to run (all)")
    args = parser.parse_args(argv)
    if args.quick:
        args.trivial, args.async_tests, args.repeats = 500, 100, 3
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    results: dict[str, Any] = {
        "command": "python -m benchmarks.leaks " + " ".join(argv or sys.argv[1:]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    parts = {"plugin": bench_plugin, "sweeper": bench_sweeper, "chains": bench_chains}
    for name, bench in parts.items():  # chains last: it imports vllm and torch
        if name in args.only:
            results[name] = bench(args, log)
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(report(results))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
