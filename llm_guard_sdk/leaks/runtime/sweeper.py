"""The runtime leak sweeper: what a closed session owned must be gone ``leak_grace`` s later.

At close (a guard close hook) the session, its guarded streams, their source generators and its
attachments become weak references (see :mod:`~llm_guard_sdk.leaks.runtime.tracking`), queued
in close order. Every sampler tick looks only at the records whose grace has passed, so a sweep
costs O(sessions due), never a heap walk. Survivors are *suspected*; a background task collects
garbage (at most once per ``collect_interval``) and those still alive are *confirmed*. Only
confirmed leaks get forensics, bounded per sweep: chain, retained size, allocation site, and a
PNG graph for the first few. Results: the ``leaks`` status section, ``/llm-guard/leaks`` (JSON),
and one warning log line per leak.

The sweeper uses only the guard's public extension points (hooks, status sections, control
routes, ``extensions``) and Session's public properties.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import tempfile
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from llm_guard_sdk.leaks import deps
from llm_guard_sdk.leaks.runtime.forensics import Limits, examine, format_size
from llm_guard_sdk.leaks.runtime.tracking import REVIVED, DeathWatch, SessionWatch, Tracked
from llm_guard_sdk.leaks.settings import LeakSettings

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard
    from llm_guard_sdk.session import Session

logger = logging.getLogger("llm_guard_sdk.leaks")


class LeakSweeper:
    """Tracks closed sessions of one guard and reports what outlives them.

    Args:
        guard: The guard to attach to (hooks, status section, ``/leaks`` route).
        grace: Seconds after close before a survivor is suspected; ``settings.leak_grace``.
        collect_interval: Minimum seconds between the sweeper's ``gc.collect()`` calls.
        revival_interval: Minimum seconds between heap walks looking for objects that died in a
            GC run and were revived by a ``__del__`` (only done when such deaths happened).
        max_forensics: Objects examined (chain, size, graph) per confirmation pass.
        recent: How many leak reports to keep for status and ``/leaks``.
        graphs: How many PNG graphs to draw in the process's lifetime (disk and CPU bound).
        report_dir: Where PNGs go; a per-process directory under the temp dir by default.
        limits: Depth/time bounds of the forensics; content logging follows ``settings``.
        settings: :class:`LeakSettings`; ``LeakSettings()`` (the environment) when omitted.
    """

    def __init__(self, guard: Guard, *, grace: float | None = None,
                 collect_interval: float = 5.0, revival_interval: float = 30.0,
                 max_forensics: int = 8, recent: int = 20,
                 graphs: int = 5, report_dir: str | Path | None = None,
                 limits: Limits | None = None, settings: LeakSettings | None = None) -> None:
        self.guard = guard
        self.settings = settings = settings if settings is not None else LeakSettings()
        self.grace = settings.leak_grace if grace is None else grace
        self.collect_interval = collect_interval
        self.revival_interval = revival_interval
        self.max_forensics = max_forensics
        self.limits = limits or Limits(log_content=settings.log_content)
        self.graphs_left = graphs
        self.report_dir = Path(report_dir) if report_dir is not None else Path(
            tempfile.gettempdir()) / f"llm-guard-leaks-{os.getpid()}"
        self.deaths = DeathWatch()
        self.watch = SessionWatch(on_death=self.deaths.died)
        self.recent: deque[dict[str, Any]] = deque(maxlen=recent)
        self.suspected_total = 0
        self.confirmed_total = 0
        self.sessions_tracked_total = 0
        self.sweeps_total = 0
        self._pending: deque[tuple[float, list[Tracked]]] = deque()
        self._suspects: list[tuple[float, Tracked]] = []
        self._last_collect = self._last_revival = float("-inf")
        self._worker: asyncio.Task[None] | None = None

    name = "leaks"
    """The guard keeps the sweeper as its ``"leaks"`` extension (``guard.extension("leaks")``)."""

    def setup(self, guard: Guard) -> None:
        """Extension entry point: ``guard.add_extension(sweeper)`` attaches it once."""
        if guard is not self.guard:
            raise ValueError("a LeakSweeper is set up on the guard it was built for")
        self.attach()

    def attach(self) -> LeakSweeper:
        """Register with the guard's hooks; done once by :func:`enable_leak_sweeper`."""
        guard = self.guard
        self.deaths.start()
        guard.add_stream_hook(self.watch.on_stream)
        guard.add_close_hook(self.on_close)
        guard.add_tick_hook(self.on_tick)
        guard.add_status_section("leaks", self.status)
        guard.add_control_route("/leaks", self.report_route)
        return self

    # -- hooks (request path: O(objects the session owned)) -------------------------------------

    def on_close(self, session: Session) -> None:
        """Close hook: queue weak references to everything the session owned."""
        records = self.watch.on_close(session)
        if records:
            now = time.monotonic()
            for record in records:
                record.since = now
            self._pending.append((now, records))
            self.sessions_tracked_total += 1

    def on_tick(self, guard: Guard) -> None:
        """Tick hook: scan the sessions due; start a confirmation pass when needed."""
        self.scan()
        if (self._suspects or self._revival_due()) and (
                self._worker is None or self._worker.done()):
            self._worker = asyncio.get_running_loop().create_task(
                self.confirm_async(), name="llm-guard-leak-sweeper")

    # -- sweeping ----------------------------------------------------------------------------

    @property
    def worker(self) -> asyncio.Task[None] | None:
        """The background confirmation pass: running, or the last one (None before any)."""
        return self._worker

    @property
    def tracked(self) -> int:
        """Sessions whose grace has not passed yet."""
        return len(self._pending)

    def scan(self, now: float | None = None) -> int:
        """Move survivors of sessions past their grace to the suspects; returns how many."""
        self.sweeps_total += 1
        cutoff = (time.monotonic() if now is None else now) - self.grace
        pending, suspects = self._pending, self._suspects
        found = 0
        while pending and pending[0][0] <= cutoff:
            closed_at, records = pending.popleft()
            for record in records:
                if record.alive():
                    suspects.append((closed_at, record))
                    found += 1
                elif record.ref is None:
                    self.watch.release((record,))
        self.suspected_total += found
        return found

    def _revival_due(self) -> bool:
        return self.deaths.pending and (
            time.monotonic() - self._last_revival >= self.revival_interval)

    def sweep(self, now: float | None = None) -> list[dict[str, Any]]:
        """Scan and confirm synchronously (tests, benchmarks, shutdown); returns new reports."""
        self.scan(now)
        if not self._suspects and not self._revival_due():
            return []
        batch, self._suspects = self._suspects, []
        return self._publish(self._collect_and_examine(batch))

    async def confirm_async(self) -> None:
        """Collect garbage and examine suspects in a worker thread, off the event loop."""
        wait = self._last_collect + self.collect_interval - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        batch, self._suspects = self._suspects, []
        try:
            reports = await anyio.to_thread.run_sync(self._collect_and_examine, batch)
        except Exception:
            self.guard.record_internal_error("leak sweeper")
            return
        self._publish(reports)

    def _collect_and_examine(self, batch: list[tuple[float, Tracked]]) -> list[dict[str, Any]]:
        gc.collect()
        self._last_collect = time.monotonic()
        survivors = [(record, record.get()) for _, record in batch]
        if self._revival_due():
            self._last_revival = time.monotonic()
            survivors.extend((replace(record, kind="revived"), obj)
                             for record, obj in self.deaths.revived())
        reports = self._examine(survivors)
        self.watch.release(record for _, record in batch)
        return reports

    def _examine(self, survivors: list[tuple[Tracked, Any]]) -> list[dict[str, Any]]:
        """Forensics for the objects that survived a collection (bounded per pass)."""
        now = time.monotonic()
        ignore = {id(survivors), id(self._suspects), id(self._pending)}
        ignore.update(id(record) for record, _ in survivors)
        if self._worker is not None:
            ignore.add(id(self._worker))
        reports: list[dict[str, Any]] = []
        # Distinct (kind, type) first, so a flood of one leak does not hide another.
        firsts: dict[tuple[str, str], int] = {}
        for index, (record, obj) in enumerate(survivors):
            if obj is not None:
                firsts.setdefault((record.kind, record.type_name), index)
        order = sorted(range(len(survivors)), key=lambda i: (
            firsts.get((survivors[i][0].kind, survivors[i][0].type_name)) != i, i))
        survivors[:] = [survivors[i] for i in order]
        budget = self.max_forensics
        while survivors:
            record, obj = survivors.pop(0)
            if obj is None:
                continue
            if budget > 0:
                budget -= 1
                limits = self.limits
                if self.graphs_left > 0 and deps.dot_path() is not None:
                    limits = Limits(**{**vars(limits), "graph_dir": self.report_dir})
                report = examine(obj, record, limits=limits, ignore=ignore,
                                 graph_name=f"leak-{self.confirmed_total + len(reports) + 1}")
                if report["graph"]:
                    self.graphs_left -= 1
            else:
                report = {**record.describe(), "size_bytes": None, "graph": None,
                          "chain": {"status": "skipped", "steps": [], "text":
                                    "not examined (forensics budget of this sweep spent)"}}
            del obj
            report["closed_seconds_ago"] = round(now - record.since, 3)
            if record.kind == "revived":
                report["note"] = REVIVED
            reports.append(report)
        return reports

    def _publish(self, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for report in reports:
            self.confirmed_total += 1
            report["id"] = self.confirmed_total
            report["detected_at"] = time.time()
            self.recent.append(report)
            logger.warning(
                "llm-guard leak: %s %s of session %s alive %.1f s after close (%s); held by %s%s",
                report["kind"], report["type"], report["owner"], report["closed_seconds_ago"],
                "not measured" if report["chain"]["status"] == "skipped"
                else format_size(report["size_bytes"]), report["chain"]["text"],
                f"; graph {report['graph']}" if report["graph"] else "")
        return reports

    # -- results -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The ``leaks`` section of the status document (recent reports in short form)."""
        return {
            **self._counters(),
            "recent": [{k: r.get(k) for k in ("id", "owner", "kind", "type", "size_bytes",
                                               "graph")} | {"chain": r["chain"]["text"]}
                       for r in list(self.recent)[-5:]],
        }

    def report(self) -> dict[str, Any]:
        """The full JSON report served at ``/llm-guard/leaks``."""
        return {**self._counters(), "recent": list(self.recent)}

    def report_route(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        """Control route handler for ``/llm-guard/leaks``."""
        return 200, self.report()

    def _counters(self) -> dict[str, Any]:
        return {
            "enabled": True,
            "mode": deps.mode()["text"],
            "grace_seconds": self.grace,
            "tracked_sessions": self.tracked,
            "sessions_tracked_total": self.sessions_tracked_total,
            "suspected_total": self.suspected_total,
            "confirmed_total": self.confirmed_total,
            "untrackable_total": self.watch.untrackable_total,
            "held_for_check": self.watch.held_now,
            "sweeps_total": self.sweeps_total,
        }


def enable_leak_sweeper(guard: Guard, **options: Any) -> LeakSweeper:
    """Attach a :class:`LeakSweeper` (and the snapshot endpoint) to ``guard``; idempotent.

    ``LLM_GUARD_LEAKS=1`` does this for every guard built from the environment.
    """
    existing = guard.extension(LeakSweeper.name)
    if isinstance(existing, LeakSweeper):
        return existing
    from llm_guard_sdk.leaks.runtime.heap_diff import enable_snapshots

    enable_snapshots(guard)
    sweeper: LeakSweeper = guard.add_extension(LeakSweeper(guard, **options))
    return sweeper
