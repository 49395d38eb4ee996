"""Measure what sessions own, within a CPU budget per sampler tick.

Deep sizes are expensive (pympler walks every referent), so the sampler measures a few sessions
per tick, round-robin, and stops when its budget is spent. Sizes therefore lag by a few ticks,
which is fine for choosing eviction victims and never costs the request path anything.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable

from llm_guard_sdk.session import Session

_CONTAINERS = (list, tuple, set, frozenset)


def fallback_sizeof(obj: object, _depth: int = 0, _seen: set[int] | None = None) -> int:
    """Approximate deep size of builtin containers when pympler is not installed."""
    seen = _seen if _seen is not None else set()
    if id(obj) in seen or _depth > 8:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj, 0)
    if isinstance(obj, dict):
        for key, value in obj.items():
            size += fallback_sizeof(key, _depth + 1, seen)
            size += fallback_sizeof(value, _depth + 1, seen)
    elif isinstance(obj, _CONTAINERS):
        for item in obj:
            size += fallback_sizeof(item, _depth + 1, seen)
    elif hasattr(obj, "__dict__"):
        size += fallback_sizeof(vars(obj), _depth + 1, seen)
    return size


def load_sizer() -> Callable[[object], int]:
    """Pympler's ``asizeof`` when the ``leaks`` extra is installed, else a builtin walker."""
    try:
        from pympler.asizeof import asizeof
    except ImportError:
        return fallback_sizeof

    def sizer(obj: object) -> int:
        return int(asizeof(obj))  # type: ignore[no-untyped-call,unused-ignore]

    return sizer


class AttachmentSizer:
    """Round-robin deep-size measurement of attached objects under a time budget."""

    def __init__(self, budget_seconds: float, sizer: Callable[[object], int] | None = None) -> None:
        self.budget = budget_seconds
        self._sizer = sizer or load_sizer()
        self._cursor = 0

    def measure(self, sessions: Iterable[Session]) -> list[Session]:
        """Update ``attached_bytes`` for as many sessions as the budget allows; return them."""
        pending = [s for s in sessions if s.attachments]
        if not pending:
            return []
        start = self._cursor % len(pending)
        deadline = time.perf_counter() + self.budget
        measured: list[Session] = []
        for offset in range(len(pending)):
            session = pending[(start + offset) % len(pending)]
            session.attached_bytes = sum(self._sizer(obj) for obj in session.attachments)
            measured.append(session)
            if time.perf_counter() >= deadline:
                break
        self._cursor = start + len(measured)
        return measured
