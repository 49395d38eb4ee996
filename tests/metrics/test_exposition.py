"""Multiprocess housekeeping: sweeping killed workers' files, marking this one dead on stop."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from llm_guard_sdk.metrics import GuardMetrics, sweep_dead_workers
from tests.metrics.support import metrics_guard

pytestmark = pytest.mark.anyio


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweeping_removes_only_dead_workers_live_gauges(tmp_path: Path) -> None:
    dead, me = dead_pid(), os.getpid()
    names = [f"gauge_liveall_{dead}.db", f"gauge_livemax_{dead}.db", f"counter_{dead}.db",
             f"gauge_liveall_{me}.db", "gauge_liveall_notapid.db"]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    assert sweep_dead_workers(str(tmp_path), alive=me) == [dead]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"counter_{dead}.db", f"gauge_liveall_{me}.db", "gauge_liveall_notapid.db"])
    assert sweep_dead_workers(str(tmp_path / "missing")) == []  # best effort, never raises


async def test_stopping_the_guard_marks_this_worker_dead(tmp_path: Path) -> None:
    mine = tmp_path / f"gauge_liveall_{os.getpid()}.db"
    mine.write_bytes(b"")
    guard, _ = metrics_guard(metrics=GuardMetrics(multiprocess_dir=str(tmp_path)))
    await guard.stop()
    assert not mine.exists()
    other, _ = metrics_guard()  # single process: stopping touches no file
    (tmp_path / mine.name).write_bytes(b"")
    await other.stop()
    assert mine.exists()
