"""What every benchmark's command line shares: flags, environment, the report and its JSON.

A benchmark module supplies its own flags, a ``run(args, log) -> dict`` and a
``report(result) -> str``; :func:`main` wraps them in the same result document
(``command``, ``config``, ``environment``, the run's keys, ``elapsed_s``), prints the report
and writes ``--json``. The servers it measures are started with
:class:`tests.support.server.UvicornServer`, the test suite's spawner.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from llm_guard_sdk import hotpath

Log = Callable[[str], None]


def log(line: str) -> None:
    """Progress goes to stderr, so stdout carries only the report."""
    print(line, file=sys.stderr, flush=True)


def new_parser(module: str, doc: str) -> argparse.ArgumentParser:
    """A parser named ``python -m MODULE``, described by the first paragraph of ``doc``."""
    return argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None, *,
          quick: dict[str, Any], full: dict[str, Any]) -> argparse.Namespace:
    """Add ``--quick`` and ``--json``, parse, and fill each unset size from ``quick``/``full``."""
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results here")
    args = parser.parse_args(argv)
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def environment(packages: Iterable[str], **extra: Any) -> dict[str, Any]:
    """Where the numbers were taken: host, Python, load at start, installed versions."""
    versions = {}
    for package in packages:
        with contextlib.suppress(PackageNotFoundError):
            versions[package] = version(package)
    return {
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "hot_path": hotpath.implementation(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        **extra,
        "versions": versions,
    }


def cpu_stall_us() -> int | None:
    """Total microseconds in which some runnable task waited for a CPU (Linux PSI), if known."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().rsplit("total=", 1)[1])
    except (OSError, IndexError, ValueError):
        return None


def stall_pct(stall0: int | None, stall1: int | None, wall: float) -> float | None:
    """Share of ``wall`` seconds in which some task on the host waited for a CPU."""
    return None if stall0 is None or stall1 is None else (stall1 - stall0) / 1e4 / wall


def median_or_none(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def main(module: str, argv: Sequence[str] | None, args: argparse.Namespace,
         env: dict[str, Any], run: Callable[[argparse.Namespace, Log], dict[str, Any]],
         report: Callable[[dict[str, Any]], str]) -> int:
    """Run, print the report and ``(took N s)``, write ``--json``; the exit status."""
    result: dict[str, Any] = {
        "command": f"python -m {module} " + " ".join(sys.argv[1:] if argv is None else argv),
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "environment": env,
    }
    started = time.perf_counter()
    result.update(run(args, log))
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    print()
    print(report(result))
    print(f"(took {result['elapsed_s']} s)")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


_TERMINATOR = b"\r\n0\r\n\r\n"  # the chunked body's last chunk; cannot occur earlier here


async def fetch_raw(port: int, path: str, expect: int, gaps: list[float] | None = None) -> None:
    """A minimal HTTP/1.1 client: one request, count bytes until the last-chunk marker.

    It does not parse the chunked framing, so it costs far less CPU per chunk than httpx and
    can outrun the server on a small machine (a server-bound load). ``gaps`` (optional) gets the
    time between two reads.
    """
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    clock = time.perf_counter
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode())
        got, head, tail, last = 0, b"", b"", 0.0
        while True:
            data = await reader.read(262144)
            if not data:
                raise RuntimeError(f"{path}: connection closed after {got} bytes")
            if gaps is not None:
                now = clock()
                if last:
                    gaps.append(now - last)
                last = now
            if len(head) < 12:
                head += data[:12]
            got += len(data)
            tail = (tail + data)[-len(_TERMINATOR):]
            if tail == _TERMINATOR:
                break
        if not head.startswith(b"HTTP/1.1 200") or got < expect:
            raise RuntimeError(f"{path}: {head!r}, {got} bytes for a {expect}-byte body")
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
