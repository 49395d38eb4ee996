"""Every metric the guard exports: name, type, labels, help text and multiprocess mode.

Names follow Prometheus conventions (base units, ``_bytes``, ``_seconds``, ``_ratio``,
``_total``); docs/metrics.md lists them with their meaning. They are plain prometheus-client
metrics (not a custom collector) so the same code works in multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``), where each gauge says how workers combine:

* ``liveall``: one series per live worker, with a ``pid`` label (RSS and pressure are per
  worker: each worker's guard judges its own);
* ``livemax``: the worst live worker (the level, the thresholds, breaker states);
* ``livesum``: summed over live workers (sessions, open streams, tenant figures).

Counters and histograms are summed over workers, dead ones included (totals never go back).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge

from llm_guard_sdk.metrics.histograms import (
    HELD_BYTES_BUCKETS,
    LATENCY_BUCKETS,
    WeightedHistogram,
)

__all__ = ["PREFIX", "GuardFamilies"]

PREFIX = "llm_guard_"
_Mode = Literal["liveall", "livemax", "livesum"]


@dataclass(frozen=True, slots=True)
class GuardFamilies:
    """The metric objects of one guard, registered on one registry."""

    memory_used: Gauge
    memory_limit: Gauge
    memory_pressure: Gauge
    level: Gauge
    threshold: Gauge
    sessions: Gauge
    streams_open: Gauge
    session_held: WeightedHistogram
    sessions_opened: Counter
    sessions_closed: Counter
    evictions: Counter
    shed: Counter
    streams: Counter
    leaks: Counter
    internal_errors: Counter
    heap_trims: Counter
    heap_trim_freed: Counter
    first_token: WeightedHistogram
    inter_chunk: WeightedHistogram
    tenant_sessions: Gauge
    tenant_held: Gauge
    breaker_state: Gauge
    breaker_refused: Counter

    @classmethod
    def build(cls, registry: CollectorRegistry) -> GuardFamilies:
        """Create every metric on ``registry`` (one guard's; a name twice raises there)."""
        r = registry

        def gauge(name: str, doc: str, labels: tuple[str, ...] = (), *,
                  mode: _Mode = "livesum") -> Gauge:
            return Gauge(PREFIX + name, doc, labels, registry=r, multiprocess_mode=mode)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(PREFIX + name, doc, labels, registry=r)

        return cls(
            memory_used=gauge("memory_used_bytes", "Memory in use as each source counts it "
                              "(process: this worker's RSS; cgroup: the container's).",
                              ("source",), mode="liveall"),
            memory_limit=gauge("memory_limit_bytes", "The ceiling of each source that has one.",
                               ("source",), mode="liveall"),
            memory_pressure=gauge("memory_pressure_ratio", "Used over limit per source (0-1, "
                                  "above 1 past the limit); the guard acts on the worst "
                                  "evicting one.", ("source",), mode="liveall"),
            level=gauge("level", "The guard's level: 0 normal, 1 warn, 2 evict, 3 shed.",
                        mode="livemax"),
            threshold=gauge("threshold_ratio", "Pressure at which each level starts.",
                            ("level",), mode="livemax"),
            sessions=gauge("sessions", "Live sessions by state (active: streaming or an HTTP "
                           "request in flight; idle: WebSockets between prompts).", ("state",)),
            streams_open=gauge("streams_open", "Guarded streams open now."),
            session_held=WeightedHistogram(
                PREFIX + "session_held_bytes", "Most bytes each closed session held (attached, "
                "buffered, KV cache, declared), observed when it closed.",
                registry=r, buckets=HELD_BYTES_BUCKETS),
            sessions_opened=counter("sessions_opened_total", "Sessions opened (HTTP requests "
                                    "and WebSocket connections guarded)."),
            sessions_closed=counter("sessions_closed_total", "Sessions closed, by reason.",
                                    ("reason",)),
            evictions=counter("evictions_total", "Healthy sessions the guard closed to free "
                              "memory, by reason (evicted, idle_timeout).", ("reason",)),
            shed=counter("shed_total", "New sessions refused, by protocol (http, websocket) and "
                         "reason (memory_pressure, max_sessions, tenant_quota, ...).",
                         ("protocol", "reason")),
            streams=counter("streams_total", "Guarded streams ended, by outcome (completed, "
                            "disconnected, timeout, evicted, error, ...).", ("outcome",)),
            leaks=counter("leaks_total", "Leak findings of the leak sweeper, by kind "
                          "(suspected, confirmed, untrackable).", ("kind",)),
            internal_errors=counter("internal_errors_total", "Guard bugs caught; the request "
                                    "they happened in went on unguarded."),
            heap_trims=counter("heap_trims_total", "Heap trims (gc + malloc_trim) after "
                               "evictions."),
            heap_trim_freed=counter("heap_trim_freed_bytes_total", "RSS bytes the heap trims "
                                    "gave back to the OS."),
            first_token=WeightedHistogram(
                PREFIX + "time_to_first_token_seconds", "Time from a stream's start to its "
                "first chunk, measured on the guard's tick.", registry=r,
                buckets=LATENCY_BUCKETS),
            inter_chunk=WeightedHistogram(
                PREFIX + "inter_chunk_seconds", "Gaps between a stream's chunks, measured on the "
                "guard's tick (gaps shorter than a tick are averaged over it).", registry=r,
                buckets=LATENCY_BUCKETS),
            tenant_sessions=gauge("tenant_sessions", "Live sessions of the top tenants "
                                  "(the rest under tenant=\"other\").", ("tenant",)),
            tenant_held=gauge("tenant_held_bytes", "Held bytes of the top tenants (the rest "
                              "under tenant=\"other\").", ("tenant",)),
            breaker_state=gauge("breaker_state", "Each backend's circuit breaker: 0 closed, "
                                "1 half-open, 2 open.", ("backend",), mode="livemax"),
            breaker_refused=counter("breaker_refused_total", "Calls a circuit breaker refused, "
                                    "by backend.", ("backend",)),
        )
