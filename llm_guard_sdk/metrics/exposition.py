"""Rendering the metrics, in one process or across the workers of a multiprocess server.

Single process: the guard's own registry is rendered (``generate_latest``). Multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR`` set before the process started): each worker's values live in
files in that directory, and the one worker that answers a scrape renders all of them with a
:class:`~prometheus_client.multiprocess.MultiProcessCollector` on a fresh registry, keeping only
the ``llm_guard_`` families (an app may keep its own metrics in the same directory; its own
``/metrics`` shows those).

A worker that stops cleanly marks itself dead (``mark_process_dead``: its ``live*`` gauge files
go, its counters stay in the sums). A worker that is killed cannot; each guard therefore, on
start and then every ``sweep_interval``, marks dead the workers whose pid no longer runs.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

import psutil
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from llm_guard_sdk.metrics.families import PREFIX

__all__ = ["GuardFamiliesOnly", "multiprocess_dir", "render", "sweep_dead_workers"]

_LIVE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")


def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` when set (prometheus-client's multiprocess mode), else None."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class GuardFamiliesOnly(Collector):
    """The ``llm_guard_*`` families of another collector (the multiprocess one)."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector

    def collect(self) -> Iterable:  # type: ignore[type-arg]
        """The wrapped collector's families whose name starts with ``llm_guard_``."""
        return [family for family in self.collector.collect()
                if family.name.startswith(PREFIX)]


def render(registry: CollectorRegistry, directory: str | None) -> bytes:
    """The Prometheus text format: ``registry``'s, or every worker's from ``directory``."""
    if directory is None:
        return generate_latest(registry)
    merged = CollectorRegistry(auto_describe=False)
    collector = MultiProcessCollector(None, path=directory)  # type: ignore[no-untyped-call]
    merged.register(GuardFamiliesOnly(collector))
    return generate_latest(merged)


def sweep_dead_workers(directory: str, *, alive: int | None = None) -> list[int]:
    """Mark dead the workers of ``directory`` whose pid no longer runs; returns their pids.

    ``alive`` (this process) is never marked. Best effort: a file that vanishes meanwhile (a
    sibling sweeping too) is not an error.
    """
    pids: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in Path(directory).iterdir():
            match = _LIVE_FILE.fullmatch(entry.name)
            if match is not None:
                pids.add(int(match.group(1)))
    dead = sorted(pid for pid in pids if pid != alive and not psutil.pid_exists(pid))
    for pid in dead:
        mark_dead(pid, directory)
    return dead


def mark_dead(pid: int, directory: str) -> None:
    """``mark_process_dead(pid)``: drop the worker's live gauges; best effort, never raises."""
    with contextlib.suppress(OSError):
        mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]
