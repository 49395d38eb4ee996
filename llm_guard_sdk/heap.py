"""Give freed heap back to the OS after an eviction burst (Envoy's ``shrink_heap``).

CPython frees objects into glibc's arenas, which keep the pages: RSS stays high after the guard
closed sessions, the watermark stays crossed, and the evictor would keep closing healthy ones.
``malloc_trim(0)`` releases the free pages so RSS reflects what was actually freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable


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
