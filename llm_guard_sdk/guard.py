"""The guard: monitors → policy → actions over the session registry, sampled off the request path.

One :class:`Guard` per middleware (or shared by several). It only coordinates: the monitors
(:mod:`llm_guard_sdk.monitors`) read memory, the watermark policy turns the worst pressure into a
level, and the actions (:mod:`llm_guard_sdk.actions`) of that level run, as the table in
:meth:`Guard.tick` lists. The request path only asks :meth:`Guard.admit`, and every close goes
through :meth:`Guard.close_session`. Extensions plug in through the ``add_*`` methods.
"""

# Somewhat over 300 lines: the coordinator wires every part (its registration surface is apart,
# in hooks.py); splitting the tick from the close sequence would only add indirection.

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from llm_guard_sdk.actions import Admission, Evictor, HeapTrimmer, SnapshotRing, StreamTimeouts
from llm_guard_sdk.actions.dead_peers import DeadPeers
from llm_guard_sdk.actions.progress import StreamProgress
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.config_report import add_config_route
from llm_guard_sdk.context import bound_guard
from llm_guard_sdk.events import GuardEvents
from llm_guard_sdk.extensions import Extension, configured_extensions
from llm_guard_sdk.hooks import CloseHook, ExtensionPoints
from llm_guard_sdk.monitors import (
    AttachmentSizer,
    MemorySource,
    ProcessRSSSource,
    Reading,
    build,
    find_limit,
)
from llm_guard_sdk.monitors.sampler import Sampler
from llm_guard_sdk.policy import Level, Thresholds, WatermarkPolicy
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.projection import AdmissionProjection
from llm_guard_sdk.registry import EVICTION_REASONS, SessionRegistry
from llm_guard_sdk.runtime import runtime_section
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.status import build_status
from llm_guard_sdk.tenants import TenantKeyFunction, Tenants
from llm_guard_sdk.watchers import announce, watch_guards

__all__ = ["Guard", "current_guard", "watch_guards"]  # watch_guards: see watchers.py

logger = logging.getLogger("llm_guard_sdk")

_Action = Callable[[Level], Awaitable[object]]


def current_guard() -> Guard | None:
    """The guard serving the current request, or None outside the middleware."""
    guard = bound_guard()
    return guard if isinstance(guard, Guard) else None


class Guard(ExtensionPoints):
    """Coordinates the monitors, the policy, the actions and the hooks; one sampler task.

    Args:
        config: Settings; :meth:`GuardConfig.from_env` when None.
        sources: The memory sources to poll instead of those ``config.sources`` names (tests,
            custom deployments); more can be added with :meth:`add_source`.
        extensions: Extensions (or built-in extension names such as ``"leaks"``) to set up,
            after those the config switches on (``LLM_GUARD_LEAKS=1``, ... ``SWITCHES``); one
            given here replaces the switch's (``GuardMetrics(registry=...)`` with metrics on).
        tenant_key: ``fn(scope) -> tenant or None``, instead of ``LLM_GUARD_TENANT_HEADER``.
    """

    def __init__(self, config: GuardConfig | None = None, *,
                 sources: Iterable[MemorySource] | None = None,
                 extensions: Iterable[Extension | str] = (),
                 tenant_key: TenantKeyFunction | None = None) -> None:
        self.config = cfg = config if config is not None else GuardConfig.from_env()
        self.tenants = Tenants(cfg, tenant_key)
        self.registry = SessionRegistry(cfg.max_sessions, tenants=self.tenants.book,
                                        default_tenant=cfg.tenant_default)
        self.policy = WatermarkPolicy(
            Thresholds(cfg.warn_at, cfg.evict_at, cfg.shed_at, cfg.hysteresis))
        built, limit, origin = (build(cfg.sources, cfg.memory_limit) if sources is None
                                else (list(sources), *find_limit(cfg.memory_limit)))
        self.sampler = Sampler(built, limit, limit_source=origin)
        self.events = GuardEvents()
        self.process: MemorySource = next(
            (s for s in built if isinstance(s, ProcessRSSSource)), None) or ProcessRSSSource(limit)
        # Actions, each given what it needs.
        self.projection = (AdmissionProjection(cfg.projection_window)
                           if cfg.admission_projection else None)
        self.admission = Admission(self.policy, self.registry, retry_after=cfg.retry_after,
                                   pressure=lambda: self.sampler.pressure,
                                   ceiling=cfg.shed_ceiling, projection=self.projection)
        self.evictor = Evictor(self.registry, self.close_session,
                               max_per_tick=cfg.max_evictions_per_tick,
                               min_session_age=cfg.min_session_age, idle_timeout=cfg.idle_timeout)
        self.progress = StreamProgress()  # latency samples of every stream, on the tick
        self.timeouts = StreamTimeouts(self.registry, chunk_timeout=cfg.chunk_timeout,
                                       stream_timeout=cfg.stream_timeout, progress=self.progress)
        self.heap = HeapTrimmer(self.process, trim=cfg.trim_heap)
        self.dead_peers = DeadPeers(self.close_session, send_timeout=cfg.send_timeout)
        self.snapshots = SnapshotRing(cfg.snapshot_ring_size)
        self.sizer = AttachmentSizer(cfg.size_budget_ms / 1000.0)
        # Level -> actions, run in this order on every tick whose level is at least the first.
        self._tick_table: tuple[tuple[Level, _Action], ...] = (
            (Level.WARN, self._snapshot),  # on entering warn, then every snapshot interval
            (Level[cfg.idle_timeout_level.upper()], lambda _: self.evictor.close_idle()),
            (Level.EVICT, self._evict),  # down to the target, unless a heap trim is pending
            (Level.NORMAL, lambda _: self.timeouts.run()),  # chunk_timeout, stream_timeout
            (Level.NORMAL, lambda _: self.dead_peers.run()),  # sends stalled past send_timeout
            (Level.NORMAL, self._measure_attachments),
        )
        ExtensionPoints.__init__(self)
        self.add_control_route("/status", lambda query: (200, self.status(
            include_sessions=query.get("sessions") == ["1"])))
        self.add_control_route("/ready", lambda _: self.admission.readiness(), access="public")
        # Liveness: answered while the guard sheds (a shed pod is busy, not dead).
        self.add_control_route("/live", lambda _: (200, {"alive": True}), access="public")
        add_config_route(self, cfg)  # GET /llm-guard/config: settings and their origins
        self.add_status_section("runtime", lambda: runtime_section(self.registry))
        self.add_status_section("latency", self.progress.section)
        self.add_status_section("worker", lambda: {"pid": os.getpid()})
        if self.projection is not None:
            self.add_status_section("admission_projection", self.projection.section)
        self.add_status_section("tenants", lambda: self.tenants.book.section(self.registry))
        self.add_status_section("tenant_keys", self.tenants.resolver.describe)
        self.add_tick_hook(self.tenants.tick_hook(lambda: self.registry))
        self.started_at = time.monotonic()
        self.internal_errors_total = 0
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.sample_now()
        self.events.started(self.sampler)
        given = list(extensions)  # these win over a switch's default-built one of that name
        names = {e if isinstance(e, str) else e.name for e in given}
        for extension in (*(n for n in configured_extensions(cfg) if n not in names), *given):
            self.add_extension(extension)
        announce(self, self.record_internal_error)

    # -- request path --------------------------------------------------------------------------

    def admit(self, tenant: str | None = None,
              priority: Priority = Priority.NORMAL) -> str | None:
        """Return why a new session (of ``tenant``, in class ``priority``) must be refused."""
        return self.admission.admit(tenant, priority)

    def record_shed(self, reason: str, detail: str = "", tenant: str | None = None, *,
                    protocol: str = "http") -> None:
        """Count a refused session by reason, protocol and tenant; log it with ``detail``.

        ``protocol`` is the ASGI scope type (``http``, ``websocket``); the log is rate-limited.
        """
        self.admission.record_shed(reason, tenant, protocol=protocol)
        self.events.shed(reason, detail)

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

        A failing step (a stream whose source raises on close, a hook) is counted as an internal
        error and the rest still run: this never raises ``Exception``.
        """
        if not self.registry.start_closing(session, reason):
            return
        if self.projection is not None:  # what sessions take, for admission's projection
            self.projection.observe(self.registry.peak_held_bytes(session))
        self.heap.note_closed(session.held_bytes)  # under pressure, the next tick trims
        if reason in EVICTION_REASONS:
            self.heap.request()
            self.events.evicted(session.id, reason.value, session.accounted_bytes)
        try:
            steps = [stream.request_close for stream in session.streams]
            if session.connection is not None:
                steps.append(session.connection.close)
            for step in steps:
                try:
                    await step(reason)
                except Exception:
                    self.record_internal_error("session close")
        finally:
            self._run_close_hooks(self.close_hooks, session, "close hook")
            self.registry.forget(session)
            session.drop_attachments()
            self.sizer.forget(session)  # a measurement in progress holds the attachments
            self._run_close_hooks(session.drain_close_callbacks(), session, "on_close callback")

    def _run_close_hooks(self, hooks: list[CloseHook], session: Session, where: str) -> None:
        for hook in hooks:
            try:
                hook(session)
            except Exception:
                self.record_internal_error(where)

    # -- sampler -------------------------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start the sampler on the running loop if it is not already running there."""
        loop = asyncio.get_running_loop()
        if self._task is not None and not self._task.done() and self._loop is loop:
            return
        self._loop = loop
        self._task = loop.create_task(self._run(), name="llm-guard-sampler")

    async def stop(self) -> None:
        """Stop the sampler (app shutdown), then run the stop hooks (``add_stop_hook``)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for hook in self.stop_hooks:
            try:
                hook()
            except Exception:
                self.record_internal_error("stop hook")

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                self.record_internal_error("sampler")
            await asyncio.sleep(self.config.sample_interval)

    def sample_now(self) -> float:
        """Read every source and update the level (logging a change); returns the pressure."""
        previous = self.policy.level
        pressure = self.sampler.read()
        worst = self.sampler.worst
        if self.projection is not None:  # the sample sees what the sessions admitted took
            self.projection.sampled(worst.used_bytes if worst else 0,
                                  worst.limit_bytes if worst else None)
        level = self.policy.update(pressure)
        if level != previous:
            self.events.level_changed(previous, level, self.sampler)
        return pressure

    async def tick(self) -> None:
        """One sample, then the actions of its level from the table built in ``__init__``.

        A heap trim asked for by the last tick's evictions (or, at ``warn`` and above, by sessions
        that closed holding memory) runs first, so the sample sees the pages it gave back;
        extensions' tick hooks run last.
        """
        await self.heap.trim_if_requested(under_pressure=self.policy.level >= Level.WARN)
        previous = self.policy.level
        self.sample_now()
        self.registry.note_activity()  # last_activity of active sessions, to the tick
        level = self.policy.level
        for minimum, action in self._tick_table:
            if level >= minimum:
                await action(previous)
        for hook in self.tick_hooks:
            result = hook(self)
            if result is not None:
                await result
        self.events.flush()

    async def _snapshot(self, previous: Level) -> None:
        self.snapshots.take_on_warn(previous, self.policy.level, self.sampler.readings,
                                    self.registry, pressure=self.sampler.pressure,
                                    source=self.sampler.worst_source)

    async def _evict(self, previous: Level) -> None:
        if not self.heap.pending:  # idle timeouts just closed sessions: measure first
            await self.evict()

    async def _measure_attachments(self, previous: Level) -> None:
        for session in self.sizer.measure(self.registry.sessions_with_attachments()):
            self.registry.resize(session)
            if self.projection is not None:
                self.projection.observe(session.held_bytes)

    async def evict(self) -> int:
        """Close idle sessions (LRU, sparing young ones), then the largest streams.

        Stops once the held bytes of the victims would bring pressure under the evict
        threshold minus hysteresis, or after ``max_evictions_per_tick``.
        """
        victims = await self.evictor.evict(self.sampler.evictable(), self.policy.evict_target())
        return len(victims)  # each one was logged by close_session (rate-limited)

    async def shrink_heap(self) -> int:
        """Collect garbage and ``malloc_trim(0)`` in a worker thread; returns RSS bytes freed."""
        return await self.heap.shrink()

    # -- readings and status -------------------------------------------------------------------

    @property
    def sources(self) -> list[MemorySource]:
        """The polled sources (add with :meth:`add_source`)."""
        return self.sampler.sources

    @property
    def readings(self) -> dict[str, Reading]:
        """The latest reading of every source, by name."""
        return self.sampler.readings

    @property
    def limit_bytes(self) -> int | None:
        """The effective memory limit (configured, cgroup or host RAM: the lowest)."""
        return self.sampler.limit_bytes

    def status(self, *, include_sessions: bool = False) -> dict[str, Any]:
        """The stable status document served at ``/llm-guard/status``."""
        return build_status(
            level=self.policy.level, sampler=self.sampler, registry=self.registry,
            thresholds=self.policy.thresholds,
            actions={
                "snapshots_total": self.snapshots.total,
                "evictions_by_reason": dict(self.registry.counters.evicted_by_reason),
                "shed_by_reason": dict(self.admission.shed_by_reason),
                "heap_trims_total": self.heap.trims_total,
                "heap_trim_freed_bytes_total": self.heap.freed_bytes_total,
            },
            internal_errors=self.internal_errors_total,
            uptime=time.monotonic() - self.started_at, sections=self.status_sections,
            on_section_error=self.record_internal_error, include_sessions=include_sessions)
