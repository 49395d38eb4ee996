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

Each subprocess variant runs ``--repeats`` times, interleaved; medians are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from llm_guard_sdk import CloseReason, Guard, GuardConfig, guard_stream
from llm_guard_sdk.leaks import LeakSweeper, enable_leak_sweeper

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

GUARD = Guard(GuardConfig(sources=("process",)))

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
            plain = Guard(GuardConfig(sources=("process",)))
            without_hooks.append(await _serve(plain, n))
            guard = Guard(GuardConfig(sources=("process",), leak_grace=0))
            sweeper = enable_leak_sweeper(guard)
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
    guard = Guard(GuardConfig(sources=("process",), leak_grace=3600))
    sweeper = enable_leak_sweeper(guard)
    await _serve(guard, 1000)
    start = time.perf_counter()
    for _ in range(1000):
        sweeper.scan()
    out["idle_sweep_us"] = (time.perf_counter() - start) / 1000 * 1e6
    return out


_KEEP: list[Any] = []


def _one_leak(log: Callable[[str], None]) -> float:
    async def leak() -> LeakSweeper:
        guard = Guard(GuardConfig(sources=("process",), leak_grace=0))
        sweeper = enable_leak_sweeper(guard, graphs=0)
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


def report(results: dict[str, Any]) -> str:
    p, s = results["plugin"], results["sweeper"]
    lines = [
        "plugin disabled (installed, not asked): "
        f"{p['off_us_per_test']:+.1f} us per test vs not loaded "
        f"({p['trivial_tests']} trivial tests); once per session: import "
        f"{p['plugin_import_ms']:.0f} ms (importtime), {p['plugin_load_ms_per_session']:+.0f} ms "
        "wall",
        f"plugin enabled, trivial test: {p['enabled_us_per_trivial_test']:+.1f} us per test",
        f"plugin enabled, typical async test: {p['enabled_ms_per_typical_test']:+.2f} ms per test "
        f"(test itself {p['typical_off_ms_per_test']:.2f} ms; target <= 50 ms)",
    ]
    for n, row in s["sizes"].items():
        lines.append(f"sweeper, {n} closed sessions: {row['sweep_ms']:.3f} ms per sweep "
                     f"({row['sweep_ms_per_1000']:.3f} ms per 1,000; target <= 1 ms); close hooks "
                     f"{row['close_hooks_us_per_session']:.2f} us per session")
    lines.append(f"sweeper, nothing due: {s['idle_sweep_us']:.2f} us per sweep; one confirmed "
                 f"leak's forensics: {s['forensics_ms_per_leak']:.1f} ms")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trivial", type=int, default=2000, help="trivial tests (2000)")
    parser.add_argument("--async-tests", type=int, default=300, help="typical async tests (300)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeats", type=int, default=5, help="rounds per variant (5)")
    parser.add_argument("--quick", action="store_true", help="500 / 100 tests, 3 rounds")
    parser.add_argument("--json", type=Path, default=None, help="write results here")
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
        "plugin": bench_plugin(args, log),
        "sweeper": bench_sweeper(args, log),
    }
    results["seconds"] = round(time.perf_counter() - started, 1)
    print(report(results))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
