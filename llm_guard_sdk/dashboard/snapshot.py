"""One feed snapshot: what the dashboard page shows, built from the guard's public parts.

Built once per feed interval and shared by every connected page (:mod:`.feed`). The cost is
one pass over the sessions (each one's held bytes, keeping the ``top`` largest in a heap:
O(n log top)) and O(sources); everything else is counters. No prompt or completion text is
ever read: a session row carries sizes, times, its state, its tenant and a prefix of its id.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from llm_guard_sdk.dashboard.history import Point
from llm_guard_sdk.session import Session

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard

ID_PREFIX = 8
"""Characters of a session id's random part the page shows: enough to tell rows apart, too few
to act on a session (the full id is an unguessable handle)."""
LABEL_CHARS = 48
"""Characters of a client's ``x-request-id`` shown (the middleware keeps at most 128)."""


def id_prefix(session_id: str) -> str:
    """``sess-AbCdEfGh…``: the id's kind and the first :data:`ID_PREFIX` characters."""
    kind, sep, rest = session_id.partition("-")
    if not sep:
        kind, rest = "", session_id
    return f"{kind}{sep}{rest[:ID_PREFIX]}…"


def session_row(session: Session, held: int, now: float) -> dict[str, Any]:
    """The table row of one session (never its full id, path or any content)."""
    label = session.label or ""
    return {
        "id": id_prefix(session.id),
        "request_id": label[:LABEL_CHARS],
        "kind": session.kind,
        "tenant": session.tenant,
        "priority": session.priority.label,
        "state": session.state.value,
        "age": round(now - session.created_at, 1),
        "idle": round(now - session.last_activity, 1),
        "held": held,
        "kv": session.backend_bytes,
        "streams": session.stream_count,
    }


def top_sessions(sessions: Iterable[Session], top: int) -> tuple[list[tuple[int, Session]], int]:
    """The ``top`` sessions holding the most (largest first) and the held bytes of all.

    One pass; each session's held bytes are computed once (they are summed on read).
    """
    heap: list[tuple[int, int, Session]] = []
    total = 0
    for order, session in enumerate(sessions):
        held = session.held_bytes
        total += held
        if len(heap) < top:
            heapq.heappush(heap, (held, -order, session))
        elif held > heap[0][0]:
            heapq.heapreplace(heap, (held, -order, session))
    ranked = sorted(heap, key=lambda item: (item[0], item[1]), reverse=True)
    return [(held, session) for held, _, session in ranked], total


def _sources(guard: Guard) -> list[dict[str, Any]]:
    sampler = guard.sampler
    rows = []
    for name, reading in sampler.readings.items():
        health = sampler.health.get(name)
        pressure = reading.pressure
        rows.append({"name": name, "used_bytes": reading.used_bytes,
                     "limit_bytes": reading.limit_bytes,
                     "pressure": None if pressure is None else round(pressure, 4),
                     "advisory": name in sampler.advisory,
                     "stale": bool(health and health.stale)})
    return rows


def _leaks(guard: Guard) -> int | None:
    """Confirmed leaks when the leaks extension runs, else None (the page shows "off")."""
    section = guard.status_sections.get("leaks")
    if section is None:
        return None
    value = section().get("confirmed_total")
    return value if isinstance(value, int) else None


def counters(guard: Guard) -> dict[str, Any]:
    """The totals the page shows as counters."""
    c = guard.registry.counters
    return {
        "evictions": c.evicted_total,
        "evictions_by_reason": dict(c.evicted_by_reason),
        "sheds": c.shed_total,
        "sheds_by_reason": dict(guard.admission.shed_by_reason),
        "aborts": c.streams_aborted_total,
        "timeouts": guard.timeouts.closed_total,
        "send_timeouts": c.send_timeout_total,
        "leaks": _leaks(guard),
        "internal_errors": guard.internal_errors_total,
        "opened": c.opened_total,
    }


def build_snapshot(guard: Guard, point: Point | None, *, top: int) -> dict[str, Any]:
    """Everything the page shows at one moment; ``point`` is the history's newest point."""
    registry = guard.registry
    now = time.monotonic()
    ranked, held_total = top_sessions(registry, top)
    summary = registry.summary()
    thresholds = guard.policy.thresholds
    sampler = guard.sampler
    return {
        "t": round(now - guard.started_at, 2),
        "pid": os.getpid(),  # behind several workers, the one this feed connection reached
        "level": guard.policy.level.label,
        "pressure": round(sampler.pressure, 4),
        "source": sampler.worst_source,
        "limit_bytes": sampler.limit_bytes,
        "limit_source": sampler.limit_source,
        "thresholds": {"warn": thresholds.warn, "evict": thresholds.evict,
                       "shed": thresholds.shed},
        "sources": _sources(guard),
        "point": point,
        "counters": counters(guard),
        "sessions": {
            "total": len(registry),
            "active": summary["active"],
            "idle": summary["idle"],
            "streams_open": registry.streams_open,
            "held_bytes": held_total,
            "top": top,
            "rows": [session_row(session, held, now) for held, session in ranked],
        },
    }
