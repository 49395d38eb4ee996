"""Moves the guard's figures into the metric objects: on the tick, on close, per tick sample.

Nothing here runs per streamed chunk. Every tick, gauges are set from the latest readings and
counters are advanced by the growth of the guard's own monotonic totals since the last tick
(so the hot path keeps its plain integer increments and the metrics read them off it). Figures
that cost a pass over the sessions (tenants) or over another extension (breakers, leaks) are
refreshed at most every ``slow_interval`` seconds. A closing session observes its peak held
bytes; the stream latencies come from the guard's :class:`StreamProgress` as its listener.

Label values are bounded: reasons, outcomes and backends pass through a :class:`LabelCap`
(``max_label_values`` distinct values, then ``other``), tenants are the status section's top N
plus ``other``. No session id, path, prompt or completion text ever becomes a label.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge

from llm_guard_sdk.metrics.families import GuardFamilies
from llm_guard_sdk.session import Session, SessionStream

__all__ = ["OTHER", "LabelCap", "MetricsPublisher"]

OTHER = "other"
_BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
_LEAK_KINDS = {"suspected": "suspected_total", "confirmed": "confirmed_total",
               "untrackable": "untrackable_total"}


class LabelCap:
    """Keeps the first ``limit`` distinct values of a label; later new ones become ``other``."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit!r}")
        self.limit = limit
        self._kept: set[str] = set()

    def __call__(self, value: str) -> str:
        """``value`` if kept (or room is left to keep it), else ``other``."""
        if value in self._kept:
            return value
        if len(self._kept) < self.limit:
            self._kept.add(value)
            return value
        return OTHER


class _Deltas:
    """Advances counters by how much the guard's monotonic totals grew since the last call."""

    def __init__(self) -> None:
        self._last: dict[Hashable, float] = {}

    def advance(self, counter: Counter, key: Hashable, total: float) -> None:
        grown = total - self._last.get(key, 0)
        if grown > 0:
            counter.inc(grown)
        self._last[key] = total


class MetricsPublisher:
    """Updates one guard's :class:`GuardFamilies`; the guard calls it, it never calls back.

    Args:
        families: The metric objects to update.
        max_label_values: Distinct values kept per label (reasons, outcomes, backends).
        slow_interval: Seconds between two refreshes of tenants, breakers and leaks.
        clock: Monotonic seconds (tests pass a fake one).
    """

    def __init__(self, families: GuardFamilies, *, max_label_values: int = 64,
                 slow_interval: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.families = families
        self.max_label_values = max_label_values
        self.slow_interval = slow_interval
        self.clock = clock
        self.errors_total = 0
        self._caps: dict[str, LabelCap] = {}
        self._deltas = _Deltas()
        self._sources: set[str] = set()
        self._tenants: set[str] = set()
        self._slow_at = float("-inf")

    def _cap(self, label: str, value: str) -> str:
        cap = self._caps.get(label)
        if cap is None:
            cap = self._caps[label] = LabelCap(self.max_label_values)
        return cap(value)

    # -- the tick -------------------------------------------------------------------------------

    def tick(self, guard: Any) -> None:
        """The guard's tick hook: every figure; tenants, breakers and leaks when due."""
        self.update(guard)
        now = self.clock()
        if now - self._slow_at >= self.slow_interval:
            self._slow_at = now
            self.update_slow(guard)

    def update(self, guard: Any) -> None:
        """Gauges from the latest readings and counts; counters from the totals' growth."""
        f = self.families
        self._memory(guard.sampler.readings)
        f.level.set(int(guard.policy.level))
        thresholds = guard.policy.thresholds
        for name in ("warn", "evict", "shed"):
            f.threshold.labels(name).set(getattr(thresholds, name))
        registry = guard.registry
        idle = registry.idle_count
        f.sessions.labels("active").set(len(registry) - idle)
        f.sessions.labels("idle").set(idle)
        f.streams_open.set(registry.streams_open)
        c = registry.counters
        advance = self._deltas.advance
        advance(f.sessions_opened, "opened", c.opened_total)
        for reason, total in list(c.closed_by_reason.items()):
            advance(f.sessions_closed.labels(self._cap("reason", reason)), ("closed", reason),
                    total)
        for reason, total in list(c.evicted_by_reason.items()):
            advance(f.evictions.labels(self._cap("reason", reason)), ("evicted", reason), total)
        for outcome, total in list(c.streams_by_outcome.items()):
            advance(f.streams.labels(self._cap("outcome", outcome)), ("stream", outcome), total)
        for (protocol, reason), total in list(guard.admission.shed_by_protocol.items()):
            labels = (self._cap("protocol", protocol), self._cap("reason", reason))
            advance(f.shed.labels(*labels), ("shed", protocol, reason), total)
        advance(f.internal_errors, "internal", guard.internal_errors_total)
        advance(f.heap_trims, "trims", guard.heap.trims_total)
        advance(f.heap_trim_freed, "freed", guard.heap.freed_bytes_total)

    def _memory(self, readings: Mapping[str, Any]) -> None:
        f = self.families
        seen: set[str] = set()
        for name, reading in readings.items():
            source = self._cap("source", name)
            seen.add(source)
            f.memory_used.labels(source).set(reading.used_bytes)
            if reading.limit_bytes:
                f.memory_limit.labels(source).set(reading.limit_bytes)
            pressure = reading.pressure
            if pressure is not None:
                f.memory_pressure.labels(source).set(pressure)
        for gone in self._sources - seen:  # a stale source: no figure rather than an old one
            for gauge in (f.memory_used, f.memory_limit, f.memory_pressure):
                _drop(gauge, gone)
        self._sources = seen

    def update_slow(self, guard: Any) -> None:
        """Tenants (a pass over the sessions), breakers and leaks.

        Tenant figures only when tenants are told apart (a tenant header or key function):
        otherwise every session is the default tenant's and the pass would say nothing new.
        """
        if guard.tenants.resolver.enabled:
            self._tenant_figures(guard)
        f = self.families
        breakers = guard.extension("breakers")
        for breaker in breakers if breakers is not None else ():
            backend = self._cap("backend", str(breaker.name))
            f.breaker_state.labels(backend).set(_BREAKER_STATES.get(breaker.state.value, 2))
            self._deltas.advance(f.breaker_refused.labels(backend), ("breaker", breaker.name),
                                 breaker.refused_total)
        leaks = guard.status_sections.get("leaks")
        if leaks is not None:
            counts = leaks()
            for kind, key in _LEAK_KINDS.items():
                self._deltas.advance(f.leaks.labels(kind), ("leaks", kind), counts.get(key, 0))

    def _tenant_figures(self, guard: Any) -> None:
        f = self.families
        section = guard.tenants.book.section(guard.registry)
        sessions: dict[str, float] = {}
        held: dict[str, float] = {}
        for tenant, figures in section.items():
            label = self._cap("tenant", tenant)
            sessions[label] = sessions.get(label, 0) + figures["sessions"]
            held[label] = held.get(label, 0) + figures["held_bytes"]
        for label in sessions:
            f.tenant_sessions.labels(label).set(sessions[label])
            f.tenant_held.labels(label).set(held[label])
        for gone in self._tenants - set(sessions):
            _drop(f.tenant_sessions, gone)
            _drop(f.tenant_held, gone)
        self._tenants = set(sessions)

    # -- sessions and streams -------------------------------------------------------------------

    def session_closed(self, registry: Any) -> Callable[[Session], None]:
        """The close hook: observe the closing session's peak held bytes."""
        histogram = self.families.session_held

        def observe(session: Session) -> None:
            histogram.observe(registry.peak_held_bytes(session))

        return observe

    def track(self, session: Session, stream: SessionStream, now: float) -> None:
        """Progress listener: nothing kept per stream."""
        return None

    def record(self, state: Any, lead: float, first_token: bool, share: float,
               repeats: int) -> None:
        """Progress listener: one tick's samples of one stream into the histograms."""
        f = self.families
        (f.first_token if first_token else f.inter_chunk).observe_weighted(lead, 1)
        if repeats > 0:
            f.inter_chunk.observe_weighted(share, repeats)


def _drop(gauge: Gauge, label: str) -> None:
    """Zero then remove a series (in multiprocess mode its file keeps the zero)."""
    gauge.labels(label).set(0)
    gauge.remove(label)
