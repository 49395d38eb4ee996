"""One observation window: what the recorder accumulates between two window boundaries.

Plain counters fed by the recorder (peaks from the sampler's tick, context lengths from the
request path, session ages from the close path); no clock of its own, so tests drive it with a
fake one.
"""

from __future__ import annotations

from llm_guard_sdk.quota.model import Observation

SKIP_NO_CONTEXT = "no_context"
SKIP_EMPTY = "empty"
"""Why a window produced no observation: no context length was reported in it (``L`` is
unknown), or it was too short to have a rate."""


class Window:
    """Accumulates one window from ``started_at`` (monotonic seconds).

    Args:
        started_at: The window's start, on the recorder's clock.
        opened_total: The registry's ``opened_total`` at the start; the difference at the end
            is the number of new sessions, including those that opened and closed between two
            samples.
    """

    __slots__ = ("_age_sum", "_closed", "_context_sum", "_opened_at_start", "_peak_held",
                 "_peak_process", "_peak_sessions", "_requests", "started_at")

    def __init__(self, started_at: float, opened_total: int) -> None:
        self.started_at = started_at
        self._opened_at_start = opened_total
        self._requests = 0
        self._context_sum = 0.0
        self._closed = 0
        self._age_sum = 0.0
        self._peak_process = 0
        self._peak_held = 0
        self._peak_sessions = 0

    @property
    def requests(self) -> int:
        """Context lengths reported so far."""
        return self._requests

    @property
    def mean_context(self) -> float | None:
        """Mean context length reported so far, None before the first report."""
        return self._context_sum / self._requests if self._requests else None

    def add_request(self, context_tokens: float) -> None:
        """A request of ``context_tokens`` tokens (O(1): on the request path)."""
        self._requests += 1
        self._context_sum += context_tokens

    def add_closed_session(self, age_seconds: float) -> None:
        """A session closed after ``age_seconds`` (O(1): on the close path)."""
        self._closed += 1
        self._age_sum += max(0.0, age_seconds)

    def sample(self, *, process_bytes: int, held_bytes: int, sessions: int) -> None:
        """One sampler tick's readings; the window keeps the peaks."""
        self._peak_process = max(self._peak_process, process_bytes)
        self._peak_held = max(self._peak_held, held_bytes)
        self._peak_sessions = max(self._peak_sessions, sessions)

    def finish(self, now: float, opened_total: int) -> Observation | str:
        """The window's observation, or why it has none (:data:`SKIP_NO_CONTEXT`, ...)."""
        elapsed = now - self.started_at
        if elapsed <= 0:
            return SKIP_EMPTY
        if not self._requests:
            return SKIP_NO_CONTEXT
        opened = max(0, opened_total - self._opened_at_start)
        return Observation(
            qps=opened / elapsed,
            context_tokens=self._context_sum / self._requests,
            peak_process_bytes=self._peak_process,
            peak_held_bytes=self._peak_held,
            window_seconds=elapsed,
            sessions_opened=opened,
            requests=self._requests,
            peak_sessions=self._peak_sessions,
            sessions_closed=self._closed,
            mean_session_seconds=self._age_sum / self._closed if self._closed else None,
        )
