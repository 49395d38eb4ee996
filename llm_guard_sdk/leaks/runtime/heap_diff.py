"""Heap snapshots on demand and their difference: ``GET /llm-guard/snapshot[?diff=<id>]``.

A snapshot counts live GC-tracked objects by type (what objgraph's ``growth`` counts, with flat
bytes per type), and records RSS, the session table and, when tracemalloc is tracing, a
tracemalloc snapshot. ``?diff=<id>`` takes a new one and returns what grew since snapshot
``<id>``: type counts and bytes, tracemalloc lines, RSS, sessions. Taking one walks the whole
heap, so it only ever happens on request, in a worker thread, and the route guards it: it always
needs the bearer token (even from loopback), takes one snapshot at a time (429 while one runs)
and at most one per ``min_interval`` seconds (429 with ``Retry-After``). At most ``keep``
snapshots are kept, since tracemalloc snapshots can be large.
"""

from __future__ import annotations

import gc
import math
import sys
import threading
import time
import tracemalloc
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from llm_guard_sdk.hooks import ControlResult
from llm_guard_sdk.leaks.runtime.introspect import class_name
from llm_guard_sdk.leaks.settings import LeakSettings

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard

_MAX_LIMIT = 500


@dataclass
class HeapSnapshot:
    """One snapshot; ``types`` maps type name to (count, flat bytes)."""

    id: int
    time: float
    monotonic: float
    rss_bytes: int
    sessions: dict[str, int]
    types: dict[str, tuple[int, int]]
    trace: tracemalloc.Snapshot | None

    def summary(self, top: int = 10) -> dict[str, Any]:
        """JSON description: totals and the most numerous types."""
        biggest = sorted(self.types.items(), key=lambda kv: kv[1][0], reverse=True)[:top]
        return {
            "id": self.id,
            "time": self.time,
            "rss_bytes": self.rss_bytes,
            "sessions": self.sessions,
            "objects": sum(count for count, _ in self.types.values()),
            "tracemalloc": self.trace is not None,
            "top_types": [{"type": name, "count": count, "bytes": size}
                          for name, (count, size) in biggest],
        }


def count_types() -> dict[str, tuple[int, int]]:
    """Count live GC-tracked objects (after a collection) and their flat sizes by type."""
    gc.collect()
    counts: dict[type, list[int]] = {}
    getsizeof = sys.getsizeof
    for obj in gc.get_objects():
        cls = type(obj)
        entry = counts.get(cls)
        if entry is None:
            entry = counts[cls] = [0, 0]
        entry[0] += 1
        try:  # noqa: SIM105 - once per heap object; suppress() is slower
            entry[1] += getsizeof(obj, 0)
        except Exception:  # an extension type with a broken __sizeof__: count it, size 0
            pass
    named: dict[str, tuple[int, int]] = {}
    for cls, (count, size) in counts.items():
        name = class_name(cls)
        old = named.get(name, (0, 0))
        named[name] = (old[0] + count, old[1] + size)
    return named


class HeapSnapshots:
    """The snapshots of one guard, capped at ``keep``; serves ``/llm-guard/snapshot``."""

    name = "snapshots"
    """The guard keeps it as its ``"snapshots"`` extension."""

    def __init__(self, guard: Guard, keep: int = 8, *, min_interval: float | None = None) -> None:
        if min_interval is not None and not min_interval >= 0:
            raise ValueError(f"min_interval must be seconds >= 0, got {min_interval!r}")
        self.guard = guard
        self.keep = keep
        self.min_interval = (LeakSettings().snapshot_min_interval if min_interval is None
                             else min_interval)
        self.total = 0
        self.refused_total = 0
        self._kept: OrderedDict[int, HeapSnapshot] = OrderedDict()
        self._lock = threading.Lock()
        self._busy = False
        self._last_started: float | None = None

    def setup(self, guard: Guard) -> None:
        """Extension entry point: serve ``/llm-guard/snapshot`` on ``guard``, token only."""
        guard.add_control_route("/snapshot", self.route, access="token")

    def take(self) -> HeapSnapshot:
        """Take and keep a snapshot (blocking; the route runs it in a worker thread)."""
        with self._lock:
            types = count_types()
            trace = tracemalloc.take_snapshot() if tracemalloc.is_tracing() else None
            registry = self.guard.registry
            self.total += 1
            snap = HeapSnapshot(
                id=self.total, time=time.time(), monotonic=time.monotonic(),
                rss_bytes=self.guard.process.read().used_bytes,
                sessions={"open": len(registry), **registry.summary()},
                types=types, trace=trace)
            self._kept[snap.id] = snap
            while len(self._kept) > self.keep:
                self._kept.popitem(last=False)
            return snap

    def get(self, snap_id: int) -> HeapSnapshot | None:
        """A kept snapshot by id."""
        return self._kept.get(snap_id)

    @property
    def kept_ids(self) -> list[int]:
        """Ids still kept, oldest first."""
        return list(self._kept)

    async def route(self, query: dict[str, list[str]]) -> ControlResult:
        """``GET /snapshot`` takes one; ``?diff=<id>[&limit=N]`` diffs against ``<id>``."""
        limit, error = _int_param(query, "limit", default=25, maximum=_MAX_LIMIT)
        if error:
            return 400, {"error": error}
        base: HeapSnapshot | None = None
        if "diff" in query:
            base_id, error = _int_param(query, "diff", default=0, maximum=sys.maxsize)
            if error:
                return 400, {"error": error}
            base = self.get(base_id)
            if base is None:
                return 404, {"error": f"snapshot {base_id} not found (kept: {self.kept_ids})",
                             "kept": self.kept_ids}
        refusal = self._refusal()
        if refusal is not None:
            self.refused_total += 1
            return refusal
        self._busy, self._last_started = True, time.monotonic()
        try:
            snap = await anyio.to_thread.run_sync(self.take)
        finally:
            self._busy = False
        if base is None:
            return 200, {**snap.summary(), "kept": self.kept_ids}
        return 200, diff(base, snap, limit) | {"kept": self.kept_ids}

    def _refusal(self) -> ControlResult | None:
        """429 while a snapshot runs, or until ``min_interval`` has passed since the last one."""
        if self._busy:
            return 429, {"error": "a snapshot is being taken; retry when it is done"}, \
                {"retry-after": "1"}
        if self._last_started is not None:
            wait = self._last_started + self.min_interval - time.monotonic()
            if wait > 0:
                seconds = str(math.ceil(wait))
                return 429, {"error": f"at most one snapshot per {self.min_interval:g}s; "
                             f"retry in {seconds}s"}, {"retry-after": seconds}
        return None


def _int_param(query: dict[str, list[str]], name: str, *, default: int,
               maximum: int) -> tuple[int, str | None]:
    values = query.get(name)
    if values is None:
        return default, None
    text = values[0].strip() if len(values) == 1 else ""
    if len(values) != 1 or not text.isdigit() or len(text) > 18 or not 1 <= int(text) <= maximum:
        return 0, f"{name} must be given once, as an integer from 1 to {maximum}"
    return int(text), None


def diff(before: HeapSnapshot, after: HeapSnapshot, limit: int = 25) -> dict[str, Any]:
    """What grew between two snapshots: types, tracemalloc lines, RSS and sessions."""
    rows = []
    for name in before.types.keys() | after.types.keys():
        b_count, b_size = before.types.get(name, (0, 0))
        a_count, a_size = after.types.get(name, (0, 0))
        if a_count != b_count or a_size != b_size:
            rows.append({"type": name, "before": b_count, "after": a_count,
                         "delta": a_count - b_count, "bytes_delta": a_size - b_size})
    rows.sort(key=lambda r: (r["delta"], r["bytes_delta"]), reverse=True)
    doc: dict[str, Any] = {
        "id": after.id,
        "base": before.id,
        "elapsed_seconds": round(after.monotonic - before.monotonic, 3),
        "rss_bytes": {"before": before.rss_bytes, "after": after.rss_bytes,
                      "delta": after.rss_bytes - before.rss_bytes},
        "sessions": {"before": before.sessions, "after": after.sessions,
                     "delta": {k: after.sessions.get(k, 0) - v
                               for k, v in before.sessions.items()}},
        "objects": {"before": sum(c for c, _ in before.types.values()),
                    "after": sum(c for c, _ in after.types.values())},
        "types": rows[:limit],
        "tracemalloc": None,
    }
    doc["objects"]["delta"] = doc["objects"]["after"] - doc["objects"]["before"]
    if before.trace is not None and after.trace is not None:
        stats = after.trace.compare_to(before.trace, "lineno")[:limit]
        doc["tracemalloc"] = [
            {"where": str(s.traceback[0]), "size_bytes": s.size, "size_delta_bytes": s.size_diff,
             "count": s.count, "count_delta": s.count_diff}
            for s in stats]
    else:
        doc["tracemalloc_note"] = ("tracemalloc was not tracing for both snapshots; start it "
                                   "(PYTHONTRACEMALLOC=1) for allocation-site diffs")
    return doc


def enable_snapshots(guard: Guard, keep: int = 8, *, min_interval: float | None = None
                     ) -> HeapSnapshots:
    """Serve ``/llm-guard/snapshot`` for ``guard`` (idempotent: the first settings stay).

    ``min_interval`` defaults to ``LeakSettings.snapshot_min_interval``
    (``LLM_GUARD_SNAPSHOT_MIN_INTERVAL``, 10 s).
    """
    existing = guard.extension(HeapSnapshots.name)
    if isinstance(existing, HeapSnapshots):
        return existing
    snapshots: HeapSnapshots = guard.add_extension(
        HeapSnapshots(guard, keep, min_interval=min_interval))
    return snapshots
