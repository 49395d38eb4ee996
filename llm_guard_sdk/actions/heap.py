"""Give freed heap back to the OS after an eviction burst (Envoy's ``shrink_heap``).

CPython frees objects into glibc's arenas, which keep the pages: RSS stays high after the guard
closed sessions, the watermark stays crossed, and the evictor would keep closing healthy ones.
``malloc_trim(0)`` releases the free pages so RSS reflects what was actually freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable

import anyio.to_thread

from llm_guard_sdk.monitors.base import MemorySource

logger = logging.getLogger("llm_guard_sdk")


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

    Args:
        process: The process RSS source, read before and after to measure what was freed.
        trim: Call ``malloc_trim`` (``GuardConfig.trim_heap``); False only collects garbage.
    """

    def __init__(self, process: MemorySource, *, trim: bool) -> None:
        self.process = process
        self._trim = load_malloc_trim() if trim else None
        self.pending = False
        """Set by the close sequence when it evicted; the next tick trims (and clears it)."""
        self.trims_total = 0
        self.freed_bytes_total = 0

    def request(self) -> None:
        """Ask for a trim on the next tick (several evictions in a tick trim once)."""
        self.pending = True

    async def trim_if_requested(self) -> int:
        """Trim when requested since the last time; returns RSS bytes freed."""
        if not self.pending:
            return 0
        self.pending = False
        return await self.shrink()

    async def shrink(self) -> int:
        """Collect garbage and ``malloc_trim(0)`` in a worker thread; returns RSS bytes freed."""
        trim = self._trim
        before = self.process.read().used_bytes

        def collect_and_trim() -> None:
            gc.collect()
            if trim is not None:
                trim(0)

        await anyio.to_thread.run_sync(collect_and_trim)
        freed = max(0, before - self.process.read().used_bytes)
        self.trims_total += 1
        self.freed_bytes_total += freed
        logger.info("llm-guard shrank heap: RSS dropped by %d bytes", freed)
        return freed
