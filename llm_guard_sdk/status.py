"""The status document served at ``/llm-guard/status`` (and printed by ``llm-guard status``).

Its keys are a stable interface: dashboards and the CLI read them. Extensions add their own
sections; a failing section is counted as an internal error and left out, never fatal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llm_guard_sdk.monitors.sampler import Sampler
from llm_guard_sdk.policy import Level, Thresholds
from llm_guard_sdk.registry import SessionRegistry

StatusSection = Callable[[], dict[str, Any]]


def _source_entry(sampler: Sampler, name: str) -> dict[str, Any]:
    """One source: its reading (the last good one if it failed since) and its health."""
    current = sampler.readings.get(name)
    reading = current or sampler.last_reading(name)
    health = sampler.health.get(name)
    pressure = None if current is None or current.pressure is None else current.pressure
    return {
        "used_bytes": reading.used_bytes if reading else None,
        "limit_bytes": reading.limit_bytes if reading else None,
        "pressure": None if pressure is None else round(pressure, 4),
        "advisory": name in sampler.advisory,
        "stale": bool(health and health.stale),
        "errors_total": health.errors_total if health else 0,
        "last_error": health.last_error if health else "",
    }


def memory_section(sampler: Sampler) -> dict[str, Any]:
    """RSS, the limit and its origin, the worst pressure and its source, and every source.

    ``source`` names the deciding source (the one with the highest pressure among those that
    count); a stale source is listed with ``stale: true`` and no pressure.
    """
    process = sampler.readings.get("process")
    names = dict.fromkeys([*sampler.readings, *sampler.health])
    return {
        "rss_bytes": process.used_bytes if process else 0,
        "limit_bytes": sampler.limit_bytes,
        "limit_source": sampler.limit_source,
        "used_ratio": round(sampler.pressure, 4),
        "source": sampler.worst_source,
        "sources": {name: _source_entry(sampler, name) for name in names},
    }


def build_status(
    *,
    level: Level,
    sampler: Sampler,
    registry: SessionRegistry,
    thresholds: Thresholds,
    actions: Mapping[str, Any],
    internal_errors: int,
    uptime: float,
    sections: Mapping[str, StatusSection],
    on_section_error: Callable[[str], None],
    include_sessions: bool = False,
) -> dict[str, Any]:
    """Assemble the document from the guard's parts (each passed explicitly, not the guard)."""
    c = registry.counters
    accounting = registry.accounting()
    doc: dict[str, Any] = {
        "level": level.label,
        "memory": memory_section(sampler),
        "sessions": registry.summary(),
        "held": accounting["held"],  # what closing sessions would free (eviction uses it)
        "traffic": accounting["traffic"],  # bytes moved, all sessions ever: not memory
        "streams": {
            "open": registry.streams_open,
            "completed_total": c.streams_completed_total,
            "aborted_total": c.streams_aborted_total,
            "disconnected_total": c.streams_disconnected_total,
        },
        "thresholds": {
            "warn": thresholds.warn,
            "evict": thresholds.evict,
            "shed": thresholds.shed,
            "hysteresis": thresholds.hysteresis,
        },
        "actions": dict(actions),
        "errors": {"internal_total": internal_errors},
        "uptime_seconds": round(uptime, 3),
    }
    for name, section in sections.items():
        try:
            doc[name] = section()
        except Exception:
            on_section_error(f"status section {name}")
    if include_sessions:
        doc["session_list"] = [s.summary() for s in registry]
    return doc
