"""Give freed heap back to the OS after an eviction burst (Envoy's ``shrink_heap``).

CPython frees objects into glibc's arenas, which keep the pages: RSS stays high after the guard
closed sessions, the watermark stays crossed, and the evictor would keep closing healthy ones.
``malloc_trim(0)`` releases the free pages so RSS reflects what was actually freed.

The same holds for sessions that simply end while memory is tight: the OOM-survival proof
(docs/reliability.md) measured 130 MiB of closed conversations' memory still charged to the
cgroup after the load (vLLM: enough to hold the guard at ``warn``, a few % from evicting healthy
sessions) until a trim gave it back. So under pressure, closes that freed held bytes ask for a
trim too, at most once per ``min_interval`` and without holding back the evictor.

The collection before the trim is a *young* one (generations 0 and 1), and a full one at most
every ``full_collect_interval`` seconds. A full ``gc.collect()`` holds the GIL throughout, so
the event loop (the sampler, admission) stops while it runs, worker thread or not: the proof
measured 0.28-0.31 s for the workload app's 56k objects on the loaded 2-core machine, which made
every tick after an eviction 0.6-0.9 s apart instead of 0.1 s, while 30 conversations a second
arrived. What a close frees goes by reference counting (attachments are dropped); the cycles it
leaves (a cancelled stream's exception, traceback and frames) are new, so young.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import math
import time
from collections.abc import Callable

import anyio.to_thread

from llm_guard_sdk.monitors.base import MemorySource

logger = logging.getLogger("llm_guard_sdk")

FULL_COLLECT_INTERVAL = 10.0
"""Seconds between two full collections by the trimmer; trims in between collect young ones."""


def load_malloc_trim() -> Callable[[int], int] | None:
    """Return glibc's ``malloc_trim`` or None where it does not exist (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    fn: Callable[[int], int] = trim
    return fn


class HeapTrimmer:
    """Runs ``gc.collect()`` and ``malloc_trim(0)`` once after each burst of evictions.

    Also, under pressure, after sessions that held memory closed for any reason (see the module
    docstring), at most once per ``min_interval`` seconds.

    Args:
        process: The process RSS source, read before and after to measure what was freed.
        trim: Call ``malloc_trim`` (``GuardConfig.trim_heap``); False only collects garbage.
        min_interval: Seconds between two trims asked for by ordinary closes.
        full_collect_interval: Seconds between two full collections (see the module docstring).
    """

    def __init__(self, process: MemorySource, *, trim: bool, min_interval: float = 1.0,
                 full_collect_interval: float = FULL_COLLECT_INTERVAL) -> None:
        self.process = process
        self._trim = load_malloc_trim() if trim else None
        self.pending = False
        """Set by the close sequence when it evicted; the next tick trims (and clears it)."""
        self.min_interval = min_interval
        self.closed_held_bytes = 0
        """Held bytes of the sessions closed since the last trim (``note_closed``)."""
        self._last_trim = -math.inf
        self.full_collect_interval = full_collect_interval
        self._last_full_collect = -math.inf
        self.full_collections_total = 0
        self.trims_total = 0
        self.freed_bytes_total = 0

    def request(self) -> None:
        """Ask for a trim on the next tick (several evictions in a tick trim once)."""
        self.pending = True

    def note_closed(self, held_bytes: int) -> None:
        """A session that held ``held_bytes`` closed (any reason); O(1), on the close path."""
        self.closed_held_bytes += held_bytes

    async def trim_if_requested(self, *, under_pressure: bool = False) -> int:
        """Trim if asked for; returns RSS bytes freed.

        Asked for by an eviction (``request``), or, ``under_pressure``, by closed sessions that
        freed held bytes once the last trim is ``min_interval`` old.
        """
        if self.pending:
            self.pending = False
            return await self.shrink()
        if (under_pressure and self.closed_held_bytes > 0
                and time.monotonic() - self._last_trim >= self.min_interval):
            return await self.shrink()
        return 0

    def generation(self, now: float) -> int:
        """The generation the trim at ``now`` collects: 2 (full) once per interval, else 1."""
        return 2 if now - self._last_full_collect >= self.full_collect_interval else 1

    async def shrink(self) -> int:
        """Collect garbage and ``malloc_trim(0)`` in a worker thread; returns RSS bytes freed."""
        trim = self._trim
        self.closed_held_bytes = 0
        self._last_trim = now = time.monotonic()
        generation = self.generation(now)
        if generation == 2:
            self._last_full_collect = now
            self.full_collections_total += 1
        before = self.process.read().used_bytes

        def collect_and_trim() -> None:
            gc.collect(generation)
            if trim is not None:
                trim(0)

        await anyio.to_thread.run_sync(collect_and_trim)
        freed = max(0, before - self.process.read().used_bytes)
        self.trims_total += 1
        self.freed_bytes_total += freed
        logger.info("llm-guard shrank heap: RSS dropped by %d bytes", freed)
        return freed
