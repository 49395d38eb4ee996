"""The ``runtime`` status section: what the interpreter holds besides the sessions' bytes.

Open file descriptors, threads, asyncio tasks and the garbage collector's counts are the first
things to look at when memory grows without more sessions (leaked sockets, tasks nobody awaits,
cycles with ``__del__`` the collector cannot free), and none of them is visible from outside
the process as cheaply. ``llm-guard doctor`` judges them. The section also splits the
sessions and their held bytes by state, so the doctor can tell what idle sessions hold.

Computed only when the status document is requested (never on a tick or a request): one pass
over the live sessions, a ``/proc/self/fd`` listing and ``asyncio.all_tasks()``.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import threading
from collections.abc import Iterable
from typing import Any

import psutil  # type: ignore[import-untyped,unused-ignore]

from llm_guard_sdk import hotpath
from llm_guard_sdk.session import Session

__all__ = ["asyncio_task_count", "fd_limit", "gc_stats", "open_fd_count", "os_thread_count",
           "runtime_section", "sessions_by_state"]


def open_fd_count() -> int | None:
    """Open file descriptors of this process (None where the platform cannot say)."""
    try:
        return int(psutil.Process().num_fds())
    except (AttributeError, OSError, psutil.Error):
        return None


def os_thread_count() -> int:
    """Threads of this process as the OS counts them (native ones too: tokenizers, BLAS).

    The same figure ``llm-guard doctor --pid`` reads from outside; Python's own count where
    the platform cannot say.
    """
    try:
        return int(psutil.Process().num_threads())
    except (OSError, psutil.Error):
        return threading.active_count()


def fd_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE``: past it ``accept()`` and ``open()`` fail (None: unlimited)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def asyncio_task_count() -> int | None:
    """Tasks not yet done on the running event loop; None when called outside one."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return None


def gc_stats() -> dict[str, Any]:
    """Per generation: objects tracked now (``counts``), collections run; uncollectable total.

    ``uncollectable`` sums the collector's own per-generation figure; ``garbage`` is the length
    of ``gc.garbage`` (objects kept there with ``gc.DEBUG_SAVEALL`` or by old finalisers).
    """
    stats = gc.get_stats()
    return {
        "counts": list(gc.get_count()),
        "collections": [int(s.get("collections", 0)) for s in stats],
        "collected": sum(int(s.get("collected", 0)) for s in stats),
        "uncollectable": sum(int(s.get("uncollectable", 0)) for s in stats),
        "garbage": len(gc.garbage),
        "frozen": gc.get_freeze_count(),
    }


def sessions_by_state(sessions: Iterable[Session]) -> dict[str, dict[str, int]]:
    """Live sessions and their held bytes per state (``active``, ``idle``, ``closing``)."""
    states: dict[str, dict[str, int]] = {}
    for session in sessions:
        entry = states.setdefault(session.state.value, {"sessions": 0, "held_bytes": 0})
        entry["sessions"] += 1
        entry["held_bytes"] += session.held_bytes
    for name in ("active", "idle", "closing"):
        states.setdefault(name, {"sessions": 0, "held_bytes": 0})
    return states


def runtime_section(sessions: Iterable[Session]) -> dict[str, Any]:
    """The ``runtime`` status section (see the module docstring)."""
    return {
        "open_fds": open_fd_count(),
        "max_fds": fd_limit(),
        "threads": os_thread_count(),
        "python_threads": threading.active_count(),
        "asyncio_tasks": asyncio_task_count(),
        "hot_path": hotpath.implementation(),
        "gc": gc_stats(),
        "sessions_by_state": sessions_by_state(sessions),
    }
