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


def memory_section(sampler: Sampler) -> dict[str, Any]:
    """RSS, the limit, the worst evicting pressure and every source's latest reading."""
    process = sampler.readings.get("process")
    return {
        "rss_bytes": process.used_bytes if process else 0,
        "limit_bytes": sampler.limit_bytes,
        "used_ratio": round(sampler.pressure, 4),
        "source": sampler.worst_source,
        "sources": {
            name: {
                "used_bytes": r.used_bytes,
                "limit_bytes": r.limit_bytes,
                "pressure": None if r.pressure is None else round(r.pressure, 4),
                "advisory": name in sampler.advisory,
            }
            for name, r in sampler.readings.items()
        },
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
    doc: dict[str, Any] = {
        "level": level.label,
        "memory": memory_section(sampler),
        "sessions": registry.summary(),
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
