"""Measure what sessions own, within a CPU budget per sampler tick, even inside one object.

Deep sizes are expensive, so the sampler measures sessions round-robin and stops when its budget
(``size_budget_ms``) is spent, in the middle of an object if need be: each session's measurement
is a :class:`~llm_guard_sdk.monitors.deep_size.SizeWalk` that resumes on the session's next turn.
A session keeps its last complete size until the next measurement completes, so sizes lag by a
few ticks, which is fine for choosing eviction victims and never costs the request path anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from llm_guard_sdk.monitors.deep_size import SAMPLE, SizeWalk
from llm_guard_sdk.session import Session


class AttachmentSizer:
    """Round-robin deep-size measurement of attached objects under a time budget.

    Args:
        budget_seconds: Time one :meth:`measure` may take (plus one small object).
        clock: The clock the budget is measured on (tests pass a fake one).
        sample: Containers with more items are estimated from about this many.
    """

    def __init__(self, budget_seconds: float, *, clock: Callable[[], float] = time.perf_counter,
                 sample: int = SAMPLE) -> None:
        self.budget = budget_seconds
        self.clock = clock
        self.sample = sample
        self.steps_total = 0
        """Objects sized so far, over all measurements (status and tests)."""
        self._walks: dict[str, SizeWalk] = {}
        self._cursor = 0

    def forget(self, session: Session) -> None:
        """Drop a measurement in progress (the session closed): it holds the attachments."""
        self._walks.pop(session.id, None)

    def measure(self, sessions: Iterable[Session]) -> list[Session]:
        """Advance measurements until the budget is spent; return the sessions whose size changed.

        Sessions are visited round-robin from where the last call stopped; one whose
        measurement is unfinished when the budget runs out resumes on its next turn.
        """
        pending: list[Session] = []
        changed: list[Session] = []
        for session in sessions:
            if session.attachments:
                pending.append(session)
            elif session.attached_bytes:  # everything detached: nothing left to measure
                session.attached_bytes, session.attached_estimated = 0, False
                changed.append(session)
        live = {session.id for session in pending}
        for stale in [sid for sid in self._walks if sid not in live]:
            del self._walks[stale]
        if not pending:
            return changed
        clock = self.clock
        deadline = clock() + self.budget
        start = self._cursor % len(pending)
        turns = 0
        while turns < len(pending):
            session = pending[(start + turns) % len(pending)]
            turns += 1
            walk = self._walks.pop(session.id, None)
            if walk is None:
                walk = SizeWalk(session.attachments, sample=self.sample)
            before = walk.visited
            finished = walk.run(deadline, clock)
            self.steps_total += walk.visited - before
            if finished:
                session.attached_bytes, session.attached_estimated = walk.size, walk.estimated
                changed.append(session)
            else:
                self._walks[session.id] = walk  # resumes on this session's next turn
            if clock() >= deadline:
                break
        self._cursor = start + turns
        return changed
