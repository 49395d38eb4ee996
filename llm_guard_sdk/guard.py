"""The guard: sources → policy → actions over the session registry, sampled off the request path.

One :class:`Guard` per middleware (or shared by several). Its background task samples every
source each ``sample_interval``, feeds the highest pressure to the watermark policy and runs the
actions of the level: snapshot (warn), evict (evict), shed (refuse admissions), and afterwards
shrink the heap. The request path only asks :meth:`Guard.admit` and updates counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import anyio.to_thread

from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.context import bound_guard
from llm_guard_sdk.control import ControlHandler
from llm_guard_sdk.heap import load_malloc_trim
from llm_guard_sdk.monitors import (
    AttachmentSizer,
    MemorySource,
    ProcessRSSSource,
    Reading,
    build_monitors,
)
from llm_guard_sdk.policy import Level, Thresholds, WatermarkPolicy, highest_pressure
from llm_guard_sdk.registry import EVICTION_REASONS, SessionRegistry
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.snapshots import SnapshotRing

logger = logging.getLogger("llm_guard_sdk")

AdmissionCheck = Callable[[], str | None]
TickHook = Callable[["Guard"], Awaitable[None] | None]

def current_guard() -> Guard | None:
    """The guard serving the current request, or None outside the middleware."""
    guard = bound_guard()
    return guard if isinstance(guard, Guard) else None


_live_guards: weakref.WeakSet[Guard] = weakref.WeakSet()
_guard_watchers: list[Callable[[Guard], None]] = []


def watch_guards(watcher: Callable[[Guard], None]) -> Callable[[], None]:
    """Call ``watcher(guard)`` for every live guard now and for every guard created later.

    The pytest leak plugin follows sessions of guards that apps build at import time this way,
    without the app's cooperation. Returns a function that stops watching.
    """
    _guard_watchers.append(watcher)
    for guard in list(_live_guards):
        watcher(guard)

    def stop() -> None:
        with contextlib.suppress(ValueError):
            _guard_watchers.remove(watcher)

    return stop


class Guard:
    """Owns the registry, the sources, the policy and the actions; one sampler task."""

    def __init__(self, config: GuardConfig | None = None) -> None:
        self.config = config if config is not None else GuardConfig.from_env()
        cfg = self.config
        self.registry = SessionRegistry(cfg.max_sessions)
        self.policy = WatermarkPolicy(
            Thresholds(cfg.warn_at, cfg.evict_at, cfg.shed_at, cfg.hysteresis)
        )
        self.sources, self.limit_bytes = build_monitors(cfg.sources, cfg.memory_limit)
        self.process = next(
            (s for s in self.sources if isinstance(s, ProcessRSSSource)), None
        ) or ProcessRSSSource(self.limit_bytes)
        self.snapshots = SnapshotRing(cfg.snapshot_ring_size)
        self.sizer = AttachmentSizer(cfg.size_budget_ms / 1000.0)
        self.readings: dict[str, Reading] = {}
        self.pressure = 0.0
        self.worst_source = ""
        self.started_at = time.monotonic()
        self.internal_errors_total = 0
        self.heap_trims_total = 0
        self.heap_trim_freed_bytes_total = 0
        self.shed_by_reason: dict[str, int] = {}
        self._trim = load_malloc_trim() if cfg.trim_heap else None
        self._trim_pending = False
        self._admission_checks: list[AdmissionCheck] = []
        self._tick_hooks: list[TickHook] = []
        self._close_hooks: list[Callable[[Session], object]] = []
        self._status_sections: dict[str, Callable[[], dict[str, Any]]] = {}
        self.control_routes: dict[str, ControlHandler] = {"/status": self._status_route}
        self.extensions: dict[str, Any] = {}  # integrations register here (e.g. "vllm")
        self._advisory: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.sample_now()
        if cfg.leaks:  # LLM_GUARD_LEAKS=1; imported here so the core never needs the extra
            from llm_guard_sdk.leaks import enable_leak_sweeper

            enable_leak_sweeper(self)
        _live_guards.add(self)
        for watcher in tuple(_guard_watchers):
            try:
                watcher(self)
            except Exception:
                self.record_internal_error("guard watcher")

    # -- extension points (vLLM KV cache, leak sweeper, ...) ---------------------------------

    def add_source(self, source: MemorySource, *, evicts: bool = True) -> None:
        """Plug in another pressure source; the policy acts on the highest across all.

        Args:
            source: The source; sampled with the others every ``sample_interval``.
            evicts: False makes the source advisory: its pressure raises the level (snapshots,
                shedding) but never evicts sessions. Right for pools the backend manages
                itself, such as vLLM's preallocated KV cache, which cannot OOM the process.
        """
        self.sources.append(source)
        if not evicts:
            self._advisory.add(source.name)

    def add_admission_check(self, check: AdmissionCheck) -> None:
        """Add a check run per new session; a returned string sheds it with that reason."""
        self._admission_checks.append(check)

    def add_tick_hook(self, hook: TickHook) -> None:
        """Run ``hook(guard)`` on every sample, after the policy (sync or async)."""
        self._tick_hooks.append(hook)

    def add_close_hook(self, hook: Callable[[Session], None]) -> None:
        """Call ``hook(session)`` when a session closes, before it drops what it owns.

        The leak sweeper uses this to take weak references to the session, its streams and its
        attachments, which should all die shortly after.
        """
        self._close_hooks.append(hook)

    def add_stream_hook(self, hook: Callable[[Session, Any], None]) -> None:
        """Call ``hook(session, stream)`` whenever a guarded stream opens on a session."""
        self.registry.stream_hooks.append(hook)

    def add_status_section(self, name: str, section: Callable[[], dict[str, Any]]) -> None:
        """Expose ``section()`` under ``name`` in the status JSON."""
        self._status_sections[name] = section

    def add_control_route(self, suffix: str, handler: ControlHandler) -> None:
        """Serve ``handler(query) -> (status, json)`` at ``<route_prefix><suffix>``, behind auth."""
        self.control_routes[suffix] = handler

    # -- request path ------------------------------------------------------------------------

    def admit(self) -> str | None:
        """Return why a new session must be refused, or None to admit it. O(1) per check."""
        if self.policy.level >= Level.SHED:
            return "memory_pressure"
        if self.registry.full:
            return "max_sessions"
        for check in self._admission_checks:
            reason = check()
            if reason:
                return reason
        return None

    def record_shed(self, reason: str) -> None:
        """Count a refused session by reason."""
        self.registry.counters.shed_total += 1
        self.shed_by_reason[reason] = self.shed_by_reason.get(reason, 0) + 1

    def record_internal_error(self, where: str) -> None:
        """Count and log a guard bug; the request it happened in proceeds unguarded."""
        self.internal_errors_total += 1
        logger.exception("llm-guard internal error in %s; continuing unguarded", where)

    async def close_session(self, session: Session, reason: CloseReason) -> None:
        """Close a session once; the only close sequence in the SDK, always in this order.

        1. The registry marks it closing and takes it out of the eviction indexes.
        2. Its guarded streams are asked to stop (a blocked consumer is cancelled).
        3. Its connection is ended the way the client understands (``connection.close``).
        4. The guard's close hooks run (``add_close_hook``): they still see what it owns.
        5. The registry forgets it (state ``closed``) and it drops its attachments.
        6. Its own callbacks run (``session.on_close``), last.

        A failing hook or callback is counted as an internal error; the others still run.
        """
        if not self.registry.start_closing(session, reason):
            return
        if reason in EVICTION_REASONS:
            self._trim_pending = True
        try:
            for stream in session.streams:
                await stream.request_close(reason)
            connection = session.connection
            if connection is not None:
                await connection.close(reason)
        finally:
            self._run_close_hooks(self._close_hooks, session, "close hook")
            self.registry.forget(session)
            session.drop_attachments()
            self._run_close_hooks(session.drain_close_callbacks(), session, "on_close callback")

    def _run_close_hooks(
        self, hooks: list[Callable[[Session], object]], session: Session, where: str
    ) -> None:
        for hook in hooks:
            try:
                hook(session)
            except Exception:
                self.record_internal_error(where)

    # -- sampler -----------------------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start the sampler on the running loop if it is not already running there."""
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._loop is loop:
            return
        self._loop = loop
        self._task = loop.create_task(self._run(), name="llm-guard-sampler")

    async def stop(self) -> None:
        """Stop the sampler (app shutdown)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        interval = self.config.sample_interval
        while True:
            try:
                await self.tick()
            except Exception:
                self.record_internal_error("sampler")
            await asyncio.sleep(interval)

    def sample_now(self) -> float:
        """Read every source and update the level; returns the highest pressure."""
        readings: dict[str, Reading] = {}
        for source in self.sources:
            try:
                reading = source.read()
            except OSError:
                continue
            readings[reading.name] = reading
        self.readings = readings
        self.pressure, worst = highest_pressure(readings.values())
        self.worst_source = worst.name if worst is not None else ""
        self.policy.update(self.pressure)
        return self.pressure

    async def tick(self) -> None:
        """One sample and the actions it calls for."""
        if self._trim_pending:
            self._trim_pending = False
            await self.shrink_heap()
        previous = self.policy.level
        self.sample_now()
        level = self.policy.level
        if level >= Level.WARN and (previous < Level.WARN or self.snapshots.due()):
            self.snapshots.take(self)
        for session in self.registry.expired_idle(self.config.idle_timeout):
            await self.close_session(session, CloseReason.IDLE_TIMEOUT)
        if level >= Level.EVICT and not self._trim_pending:
            await self.evict()
        await self._expire_streams()
        for session in self.sizer.measure(self.registry.sessions_with_attachments()):
            self.registry.resize(session)
        for hook in self._tick_hooks:
            result = hook(self)
            if result is not None:
                await result

    async def evict(self) -> int:
        """Close idle sessions (LRU, sparing young ones), then the largest streams.

        Stops once the accounted bytes of the victims would bring pressure under the evict
        threshold minus hysteresis, or after ``max_evictions_per_tick``; the next sample
        measures what was really freed.
        """
        _, worst = highest_pressure(
            r for name, r in self.readings.items() if name not in self._advisory
        )
        target = self.policy.evict_target()
        if worst is None or not worst.limit_bytes or (worst.pressure or 0.0) < target:
            return 0
        need = worst.used_bytes - target * worst.limit_bytes
        budget = self.config.max_evictions_per_tick
        min_age = self.config.min_session_age
        victims: list[Session] = []
        freed = 0
        for session in self.registry.idle_lru():
            if len(victims) >= budget or freed >= need:
                break
            if session.age >= min_age:
                victims.append(session)
                freed += session.accounted_bytes
        if freed < need:
            chosen = {s.id for s in victims}
            for session in self.registry.largest_streams():
                if len(victims) >= budget or freed >= need:
                    break
                if session.id not in chosen:
                    victims.append(session)
                    freed += session.accounted_bytes
        for session in victims:
            await self.close_session(session, CloseReason.EVICTED)
        if victims:
            logger.warning(
                "llm-guard evicted %d session(s) at %s pressure %.2f (source %s)",
                len(victims), self.policy.level.label, self.pressure, self.worst_source,
            )
        return len(victims)

    async def _expire_streams(self) -> None:
        """Close streams stuck waiting longer than chunk_timeout or older than stream_timeout.

        The hot path reads no clock; a stream counts as stuck from the first sample that sees
        it waiting with an unchanged chunk count, so the timeout is precise to one interval.
        """
        cfg = self.config
        if cfg.chunk_timeout is None and cfg.stream_timeout is None:
            return
        now = time.monotonic()
        for session in list(self.registry.largest_streams()):
            for stream in session.streams:
                if not stream.waiting or stream.chunks != stream.stuck_chunks:
                    stream.stuck_chunks = stream.chunks if stream.waiting else -1
                    stream.stuck_since = now
                stuck = now - stream.stuck_since if stream.stuck_chunks >= 0 else 0.0
                if (cfg.chunk_timeout is not None and stuck > cfg.chunk_timeout) or (
                        cfg.stream_timeout is not None
                        and now - stream.started_at > cfg.stream_timeout):
                    await stream.request_close(CloseReason.TIMEOUT)

    async def shrink_heap(self) -> int:
        """Collect garbage and ``malloc_trim(0)`` in a worker thread; returns RSS bytes freed."""
        trim = self._trim
        before = self.process.read().used_bytes

        def collect_and_trim() -> None:
            gc.collect()
            if trim is not None:
                trim(0)

        await anyio.to_thread.run_sync(collect_and_trim)
        freed = max(0, before - self.process.read().used_bytes)
        self.heap_trims_total += 1
        self.heap_trim_freed_bytes_total += freed
        logger.info("llm-guard shrank heap: RSS dropped by %d bytes", freed)
        return freed

    def _status_route(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        return 200, self.status(include_sessions=query.get("sessions") == ["1"])

    # -- status ------------------------------------------------------------------------------

    def status(self, *, include_sessions: bool = False) -> dict[str, Any]:
        """The stable status document served at ``/llm-guard/status``."""
        process = self.readings.get("process")
        c = self.registry.counters
        doc: dict[str, Any] = {
            "level": self.policy.level.label,
            "memory": {
                "rss_bytes": process.used_bytes if process else 0,
                "limit_bytes": self.limit_bytes,
                "used_ratio": round(self.pressure, 4),
                "source": self.worst_source,
                "sources": {
                    name: {
                        "used_bytes": r.used_bytes,
                        "limit_bytes": r.limit_bytes,
                        "pressure": None if r.pressure is None else round(r.pressure, 4),
                    }
                    for name, r in self.readings.items()
                },
            },
            "sessions": self.registry.summary(),
            "streams": {
                "open": self.registry.streams_open,
                "completed_total": c.streams_completed_total,
                "aborted_total": c.streams_aborted_total,
                "disconnected_total": c.streams_disconnected_total,
            },
            "thresholds": {
                "warn": self.config.warn_at,
                "evict": self.config.evict_at,
                "shed": self.config.shed_at,
                "hysteresis": self.config.hysteresis,
            },
            "actions": {
                "snapshots_total": self.snapshots.total,
                "evictions_by_reason": dict(c.evicted_by_reason),
                "shed_by_reason": dict(self.shed_by_reason),
                "heap_trims_total": self.heap_trims_total,
                "heap_trim_freed_bytes_total": self.heap_trim_freed_bytes_total,
            },
            "errors": {"internal_total": self.internal_errors_total},
            "uptime_seconds": round(time.monotonic() - self.started_at, 3),
        }
        for name, section in self._status_sections.items():
            try:
                doc[name] = section()
            except Exception:
                self.record_internal_error(f"status section {name}")
        if include_sessions:
            doc["session_list"] = [s.summary() for s in self.registry]
        return doc
