"""A circuit breaker for one backend: closed, open, half-open, on an injectable clock.

Asyncio-native: every transition is a plain synchronous method with no ``await`` inside, so on
one event loop no two tasks can interleave within it and no lock is needed (a threading lock
would block the loop). The clock is injected so tests drive it by hand.

``aiobreaker`` and ``pybreaker`` count failures since the last success rather than over a
sliding window, read the wall clock and have no probe budget in half-open, so the breaker is
written here (~150 lines).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from llm_guard_sdk.breakers.settings import BreakerSettings
from llm_guard_sdk.errors import BackendError, BackendUnavailableError

__all__ = ["BreakerOpenError", "BreakerState", "CircuitBreaker", "classify_failure"]

logger = logging.getLogger("llm_guard_sdk")

Clock = Callable[[], float]


class BreakerState(enum.Enum):
    """Where a breaker stands; the values are what status shows."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerOpenError(BackendUnavailableError):
    """The breaker refused the request without touching the backend: answer 503.

    ``headers()`` holds the ``Retry-After`` to send (whole seconds, at least 1).
    """

    status = 503

    def __init__(self, backend: str, retry_after: float) -> None:
        super().__init__(f"backend {backend!r} is unavailable (circuit open)",
                         reason="circuit_open", retry_after=max(1, math.ceil(retry_after)))
        self.backend = backend


def classify_failure(exc: BaseException) -> str | None:
    """What an exception from the backend means for the breaker.

    ``"dead"`` (trip at once): vLLM's ``EngineDeadError`` (matched by name, so vLLM is not
    imported) or a refused connection; ``"timeout"``: a ``TimeoutError``; ``"error"``: a
    backend error answering 5xx or any other exception; None (not the backend's fault): a
    cancellation, or a backend error answering 4xx (the request was bad, the backend works).
    """
    if isinstance(exc, asyncio.CancelledError | GeneratorExit | KeyboardInterrupt | SystemExit):
        return None
    if isinstance(exc, ConnectionRefusedError) or any(
            c.__name__ == "EngineDeadError" for c in type(exc).__mro__):
        return "dead"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, BackendError) and exc.status < 500:
        return None
    return "error"


class CircuitBreaker:
    """Stops sending requests to a failing backend, and lets a few probes find out it is back.

    * **closed**: requests pass; ``failures`` failures within ``window`` seconds (a rate over
      a sliding window: older failures do not count) open it.
    * **open**: :meth:`allow` refuses for ``open_for`` seconds (:meth:`retry_after` tells how
      long is left); :meth:`trip` opens it at once (a dead engine).
    * **half_open**: once ``open_for`` passed, up to ``probes`` requests pass; ``probes``
      successes close it, one failure opens it again.

    Args:
        name: The backend's name, for status and logs.
        settings: Defaults to :class:`BreakerSettings` defaults.
        clock: Monotonic seconds; injectable for tests.
        classify: Maps an exception raised inside :meth:`guarded` to a failure kind or None.
    """

    def __init__(self, name: str, settings: BreakerSettings | None = None, *,
                 clock: Clock = time.monotonic,
                 classify: Callable[[BaseException], str | None] = classify_failure) -> None:
        if not isinstance(name, str) or not 0 < len(name) <= 64:
            raise ValueError(f"a breaker name is 1 to 64 characters, got {name!r}")
        self.name = name
        self.settings = settings if settings is not None else BreakerSettings()
        self.clock = clock
        self.classify = classify
        self._state = BreakerState.CLOSED
        self._failures: deque[float] = deque(maxlen=self.settings.failures)
        self._opened_at = 0.0
        self._probes_out = 0
        self._probes_ok = 0
        self.opened_total = 0
        self.refused_total = 0
        self.failures_total: dict[str, int] = {}
        self.last_failure: str | None = None

    @property
    def state(self) -> BreakerState:
        """The state now: an open breaker whose time is up reads as half-open."""
        if self._state is BreakerState.OPEN and self._remaining() <= 0:
            self._transition(BreakerState.HALF_OPEN, "open time elapsed")
        return self._state

    def failures_in_window(self) -> int:
        """Failures recorded within the last ``window`` seconds (at most ``failures``)."""
        since = self.clock() - self.settings.window
        return sum(1 for t in self._failures if t >= since)

    def retry_after(self) -> float:
        """Seconds until a refused caller may try again (0 when requests pass now)."""
        state = self.state
        if state is BreakerState.OPEN:
            return self._remaining()
        if state is BreakerState.HALF_OPEN and self._probes_out >= self.settings.probes:
            return 1.0  # probes are out; their answer decides
        return 0.0

    def allow(self) -> bool:
        """May a request go to the backend now? A refusal is counted; answer it with 503.

        Every allowed request must end in :meth:`record_success`, :meth:`record_failure` or
        :meth:`release` (:meth:`guarded` does it), or half-open would wait on its probe forever.
        """
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and self._probes_out < self.settings.probes:
            self._probes_out += 1
            return True
        self.refused_total += 1
        return False

    def record_success(self) -> None:
        """The backend answered; in half-open, enough successful probes close the breaker."""
        if self._state is BreakerState.HALF_OPEN:
            self._probes_out = max(0, self._probes_out - 1)
            self._probes_ok += 1
            if self._probes_ok >= self.settings.probes:
                self._transition(BreakerState.CLOSED, f"{self._probes_ok} probe(s) succeeded")

    def record_failure(self, kind: str = "error") -> None:
        """The backend failed (``kind``: error, timeout, ...); may open the breaker."""
        if kind == "dead":
            self.trip(kind)
            return
        self._count(kind)
        state = self._state
        if state is BreakerState.HALF_OPEN:
            self._open(f"probe failed ({kind})")
        elif state is BreakerState.CLOSED and self.failures_in_window() >= self.settings.failures:
            self._open(f"{self.settings.failures} failures within {self.settings.window:g}s, "
                       f"last: {kind}")

    def trip(self, kind: str = "dead") -> None:
        """Open at once (the engine died, the connection was refused), from any state."""
        self._count(kind)
        self._open(f"tripped ({kind})")

    def release(self) -> None:
        """An allowed request ended without telling anything about the backend (cancelled)."""
        if self._state is BreakerState.HALF_OPEN:
            self._probes_out = max(0, self._probes_out - 1)

    @asynccontextmanager
    async def guarded(self) -> AsyncIterator[CircuitBreaker]:
        """``async with breaker.guarded():`` around one backend call.

        Raises :class:`BreakerOpenError` (503, ``Retry-After``) without entering the block when
        the breaker refuses; records the block's outcome with :attr:`classify` otherwise.
        """
        if not self.allow():
            raise BreakerOpenError(self.name, self.retry_after())
        try:
            yield self
        except BaseException as exc:
            kind = self.classify(exc)
            if kind is None:
                self.release()
            else:
                self.record_failure(kind)
            raise
        self.record_success()

    def status(self) -> dict[str, Any]:
        """This breaker's entry in the ``breakers`` status section."""
        state = self.state
        return {
            "state": state.value,
            "failures_in_window": self.failures_in_window(),
            "opened_total": self.opened_total,
            "refused_total": self.refused_total,
            "failures_total": dict(self.failures_total),
            "last_failure": self.last_failure,
            "retry_after": round(self.retry_after(), 3),
        }

    # -- transitions ----------------------------------------------------------------------------

    def _remaining(self) -> float:
        return self._opened_at + self.settings.open_for - self.clock()

    def _count(self, kind: str) -> None:
        self._failures.append(self.clock())
        self.failures_total[kind] = self.failures_total.get(kind, 0) + 1
        self.last_failure = kind

    def _open(self, why: str) -> None:
        self._opened_at = self.clock()
        if self._state is not BreakerState.OPEN:  # already open: only the open time restarts
            self.opened_total += 1
            self._transition(BreakerState.OPEN, why)

    def _transition(self, state: BreakerState, why: str) -> None:
        previous, self._state = self._state, state
        self._probes_out = self._probes_ok = 0
        if state is BreakerState.CLOSED:
            self._failures.clear()
        level = logging.WARNING if state is BreakerState.OPEN else logging.INFO
        logger.log(level, "llm-guard breaker %r: %s -> %s (%s)", self.name, previous.value,
                   state.value, why)
