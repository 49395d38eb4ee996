"""What the doctor works on: the facts it collected, and the indicators it judges from them.

:class:`Facts` is the one shape both collectors fill (from a guard's status over HTTP, or from a
process id with psutil); a fact the target does not expose stays None and :attr:`Facts.absent`
says why, so each indicator can report ``value: null`` with that note instead of failing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["ok", "warn", "crit"]
RANK: dict[Verdict, int] = {"ok": 0, "warn": 1, "crit": 2}
"""A verdict's rank, which is also the exit code it leads to (0 ok, 1 warn, 2 crit)."""

NOT_FROM_OUTSIDE = ("not visible from outside the process (--pid): run the doctor with --url "
                    "against the guard")


@dataclass(frozen=True, slots=True)
class Indicator:
    """One finding: a value, its verdict against the thresholds, and the fix when not ok.

    ``fix`` is empty when the verdict is ok; ``note`` says why a value is missing or how it was
    measured; ``text`` is the value as a person reads it; ``detail`` carries the figures used.
    """

    name: str
    value: float | int | str | None
    verdict: Verdict = "ok"
    fix: str = ""
    text: str = ""
    note: str = ""
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form (the ``--json`` contract: name, value, verdict, fix, then extras)."""
        return {"name": self.name, "value": self.value, "verdict": self.verdict,
                "fix": self.fix if self.verdict != "ok" else "", "text": self.text,
                "note": self.note, "detail": self.detail}


def missing(name: str, note: str) -> Indicator:
    """An indicator whose data the target does not expose: null, ok, and why."""
    return Indicator(name, None, "ok", "", "n/a", note)


def worst(indicators: Iterable[Indicator]) -> Verdict:
    """The most severe verdict (ok when there are none)."""
    found: Verdict = "ok"
    for indicator in indicators:
        if RANK[indicator.verdict] > RANK[found]:
            found = indicator.verdict
    return found


def grade(value: float, warn: float, crit: float) -> Verdict:
    """``crit`` at or above ``crit``, ``warn`` at or above ``warn``, else ``ok``."""
    if value >= crit:
        return "crit"
    return "warn" if value >= warn else "ok"


def size_text(size: float | None) -> str:
    """Bytes for people: ``1.50 GiB``."""
    if size is None:
        return "n/a"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"


def round_up(value: float, step: float) -> float:
    """``value`` rounded up to a multiple of ``step``."""
    return math.ceil(value / step) * step


def percent(ratio: float) -> str:
    """``0.62`` -> ``62 %``."""
    return f"{ratio * 100:.0f} %"


@dataclass(slots=True)
class Facts:
    """Everything the indicators read; None where the target does not expose it.

    ``absent`` maps an indicator name to the reason its data is missing (when the general
    rule, "the target does not report it", is not enough).
    """

    mode: Literal["url", "pid"]
    target: str
    worker_pid: int | None = None
    level: str | None = None
    pressure: float | None = None
    rss_bytes: int | None = None
    limit_bytes: int | None = None
    limit_source: str | None = None
    deciding_source: str | None = None
    warn_at: float = 0.75
    evict_at: float = 0.85
    shed_at: float = 0.92
    cgroup_used_bytes: int | None = None
    cgroup_limit_bytes: int | None = None
    stale_sources: dict[str, str] | None = None
    open_fds: int | None = None
    max_fds: int | None = None
    threads: int | None = None
    asyncio_tasks: int | None = None
    sessions_by_state: dict[str, int] | None = None
    held_total_bytes: int | None = None
    held_idle_bytes: int | None = None
    max_sessions: int = 10000
    idle_timeout: float = 300.0
    idle_timeout_level: str = "warn"
    eviction_rate: float | None = None
    shed_rate: float | None = None
    rate_basis: str = ""
    leaks: dict[str, Any] | None = None
    gc: dict[str, Any] | None = None
    vllm: dict[str, Any] | None = None
    latency: dict[str, Any] | None = None
    internal_errors: int | None = None
    absent: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def why_absent(self, name: str, default: str) -> str:
        """The note for a missing indicator: its own reason, else ``default``."""
        return self.absent.get(name, NOT_FROM_OUTSIDE if self.mode == "pid" else default)

    @property
    def live_sessions(self) -> int | None:
        """Sessions the guard holds now (every state), or None when unknown."""
        if self.sessions_by_state is None:
            return None
        return sum(self.sessions_by_state.values())
