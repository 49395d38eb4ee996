"""Per-tenant accounting: live sessions, held bytes and refusals, and the per-tenant caps.

Session counts move in O(1) as the registry opens and forgets sessions, so the cap check on the
request path is one dict lookup. Held bytes are computed on read (:attr:`Session.held_bytes`), so
a tenant's total is refreshed by the sampler tick (one pass over the sessions, off the request
path) only while a held-bytes cap is set; the cap therefore acts on figures at most one
``sample_interval`` old. Status computes the figures fresh.

Cardinality is bounded: a tenant's entry lives while it has sessions; one with only refusals is
kept while fewer than ``max_tracked`` are, else its refusals count under ``other``, so hostile
tenant keys cannot grow the table (the keys themselves are vetted in :mod:`.keys`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llm_guard_sdk.session import Session

OTHER = "other"
"""The status entry that sums the tenants left out of the top N."""


@dataclass(slots=True)
class TenantFigures:
    """One tenant's figures; ``held_bytes`` as of the last refresh."""

    sessions: int = 0
    held_bytes: int = 0
    refused_total: int = 0

    def as_dict(self) -> dict[str, int]:
        """JSON-safe, as the status section shows it."""
        return {"sessions": self.sessions, "held_bytes": self.held_bytes,
                "refused_total": self.refused_total}


class TenantBook:
    """Counts per tenant and the caps refusing a tenant's new sessions (429, ``tenant_quota``).

    Args:
        max_sessions: Live sessions one tenant may hold; None: no cap.
        max_held_bytes: Held bytes one tenant may hold before its new sessions are refused;
            None: no cap (and no per-tick refresh).
        top: Tenants listed by name in status (most sessions first); the rest sum to ``other``.
        max_tracked: Tenants without sessions kept for their refusal counts.
    """

    def __init__(self, *, max_sessions: int | None = None, max_held_bytes: int | None = None,
                 top: int = 10, max_tracked: int = 1024) -> None:
        self.max_sessions = max_sessions
        self.max_held_bytes = max_held_bytes
        self.top = top
        self.max_tracked = max_tracked
        self.other_refused_total = 0
        self._figures: dict[str, TenantFigures] = {}

    def __len__(self) -> int:
        return len(self._figures)

    def figures(self, tenant: str) -> TenantFigures | None:
        """The tenant's figures, or None when it has no entry."""
        return self._figures.get(tenant)

    def opened(self, tenant: str) -> None:
        """A session of ``tenant`` opened (always tracked: the cap needs the count)."""
        figures = self._figures.get(tenant)
        if figures is None:
            figures = self._figures[tenant] = TenantFigures()
        figures.sessions += 1

    def closed(self, session: Session) -> None:
        """A session was forgotten: its tenant has one less; an empty entry goes."""
        figures = self._figures.get(session.tenant)
        if figures is None:
            return
        figures.sessions -= 1
        if figures.sessions <= 0:
            figures.sessions = figures.held_bytes = 0
            if not figures.refused_total:
                del self._figures[session.tenant]

    def refused(self, tenant: str) -> None:
        """A new session of ``tenant`` was refused (its quota or the server's pressure)."""
        figures = self._figures.get(tenant)
        if figures is None:
            if len(self._figures) >= self.max_tracked:
                self.other_refused_total += 1
                return
            figures = self._figures[tenant] = TenantFigures()
        figures.refused_total += 1

    def over_quota(self, tenant: str) -> bool:
        """Whether a new session of ``tenant`` would exceed its caps. O(1)."""
        figures = self._figures.get(tenant)
        if figures is None:
            return False
        if self.max_sessions is not None and figures.sessions >= self.max_sessions:
            return True
        return self.max_held_bytes is not None and figures.held_bytes >= self.max_held_bytes

    def refresh_held(self, sessions: Iterable[Session]) -> None:
        """Recompute every tenant's held bytes (the sampler tick, only with a held cap)."""
        totals: dict[str, int] = {}
        for session in sessions:
            totals[session.tenant] = totals.get(session.tenant, 0) + session.held_bytes
        for tenant, figures in self._figures.items():
            figures.held_bytes = totals.get(tenant, 0)

    def section(self, sessions: Iterable[Session]) -> dict[str, Any]:
        """The ``tenants`` status section: the top tenants by sessions, then ``other``.

        Held bytes are fresh (one pass over the sessions: status is not the request path).
        """
        self.refresh_held(sessions)
        ranked = sorted(self._figures.items(),
                        key=lambda item: (-item[1].sessions, -item[1].held_bytes, item[0]))
        doc: dict[str, Any] = {name: f.as_dict() for name, f in ranked[:self.top]}
        rest = ranked[self.top:]
        other = doc.setdefault(OTHER, TenantFigures().as_dict())
        other["sessions"] += sum(f.sessions for _, f in rest)
        other["held_bytes"] += sum(f.held_bytes for _, f in rest)
        other["refused_total"] += sum(f.refused_total for _, f in rest) + self.other_refused_total
        other["tenants"] = len(rest)
        return doc
