"""The ``"quota"`` extension: records windowed observations and fits the quota model live.

Plugs into the guard's public extension points only:

* a tick hook samples memory (the process reading, the sessions' accounted bytes) and closes a
  window every ``window`` seconds into an :class:`Observation` kept in a bounded ring;
* a close hook measures how long sessions last (``D`` for Little's law);
* ``observe_request(context_tokens)`` is called by whoever knows a request's context length (the
  app, an engine integration), O(1) on the request path; :func:`observe_context` finds the
  recorder of the guard serving the current request;
* the ``quota`` status section and ``GET /llm-guard/quota`` (the observations and the fit);
* optionally an admission check (:mod:`llm_guard_sdk.quota.admission`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.guard import current_guard
from llm_guard_sdk.quota.admission import Headroom, QuotaAdmission
from llm_guard_sdk.quota.model import Observation, QuotaFit, QuotaFitError, fit
from llm_guard_sdk.quota.settings import QuotaSettings
from llm_guard_sdk.quota.store import (
    QuotaDocument,
    mean_session_seconds,
    read_document,
    write_document,
)
from llm_guard_sdk.quota.window import Window

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard
    from llm_guard_sdk.session import Session

logger = logging.getLogger("llm_guard_sdk.quota")

NAME = "quota"


def observe_context(context_tokens: float) -> bool:
    """Report the current request's context length to its guard's recorder, if it has one.

    For handlers that do not hold the recorder: ``observe_context(len(prompt_ids))``. Returns
    False outside a guarded request or when the guard has no ``quota`` extension.
    """
    guard = current_guard()
    recorder = guard.extension(NAME) if guard is not None else None
    return isinstance(recorder, QuotaRecorder) and recorder.observe_request(context_tokens)


class QuotaRecorder:
    """The guard extension ``"quota"`` (one guard per recorder).

    Args:
        settings: :meth:`QuotaSettings.from_env` when None, so ``QuotaRecorder()`` (and
            ``guard.add_extension("llm_guard_sdk.quota:QuotaRecorder")``) read
            ``LLM_GUARD_QUOTA_*``.
        clock: Monotonic seconds; tests pass a fake one.
    """

    name = NAME

    def __init__(self, settings: QuotaSettings | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings if settings is not None else QuotaSettings.from_env()
        self.clock = clock
        self.admission = QuotaAdmission()
        self.windows_total = 0
        self.windows_skipped: dict[str, int] = {}
        self.invalid_reports_total = 0
        self.save_errors_total = 0
        self._observations: deque[Observation] = deque(maxlen=self.settings.ring_size)
        self._window: Window | None = None
        self._guard: weakref.ref[Guard] | None = None
        self._fit: QuotaFit | None = None
        self._fit_error: str | None = None
        self._fit_stale = True  # the first look says why there is no fit yet

    # -- setup -----------------------------------------------------------------------------

    def setup(self, guard: Guard) -> None:
        """Load the file (if any), then register the hooks, the section and the route."""
        if self._guard is not None and self._guard() is not guard:
            raise ConfigError("a QuotaRecorder serves one guard; build one per guard")
        path = self.settings.file
        if path is not None and Path(path).exists():
            try:
                self.load(path)
            except ConfigError as exc:
                raise ConfigError(f"LLM_GUARD_QUOTA_FILE: {exc}") from None
        self._guard = weakref.ref(guard)
        self._window = Window(self.clock(), guard.registry.counters.opened_total)
        guard.add_tick_hook(self.on_tick)
        guard.add_close_hook(self._on_close)
        guard.add_status_section(NAME, self.status_section)
        guard.add_control_route("/quota", self._route)
        if self.settings.admission:
            guard.add_admission_check(self._admission_check)

    # -- inputs ----------------------------------------------------------------------------

    def observe_request(self, context_tokens: float) -> bool:
        """Record one request's context length (tokens). O(1); never raises.

        Returns False (and counts ``invalid_reports_total``) for anything but a finite number
        >= 0, or before :meth:`setup`: on the request path a bad report must not break the app.
        """
        window = self._window
        if window is None:
            return False
        if isinstance(context_tokens, bool) or not isinstance(context_tokens, int | float) \
                or not math.isfinite(context_tokens) or context_tokens < 0:
            self.invalid_reports_total += 1
            if self.invalid_reports_total == 1:
                logger.warning("llm-guard quota: ignoring context length %r (expected a number "
                               "of tokens >= 0)", context_tokens)
            return False
        window.add_request(float(context_tokens))
        return True

    def _on_close(self, session: Session) -> None:
        if self._window is not None:
            self._window.add_closed_session(session.age)

    async def on_tick(self, guard: Guard) -> None:
        """Sample, close the window when it is due, refresh the admission numbers."""
        window = self._window
        if window is None:
            return
        now = self.clock()
        process_bytes = _process_bytes(guard)
        held_bytes = sum(s.held_bytes for s in guard.registry)
        window.sample(process_bytes=process_bytes, held_bytes=held_bytes,
                      sessions=len(guard.registry))
        closed = False
        if now - window.started_at >= self.settings.window:
            opened = guard.registry.counters.opened_total
            result = window.finish(now, opened)
            self._window = Window(now, opened)
            self.windows_total += 1
            if isinstance(result, Observation):
                self.add_observation(result)
                closed = True
            else:
                self.windows_skipped[result] = self.windows_skipped.get(result, 0) + 1
        if self.settings.admission:
            used = held_bytes if self.settings.target == "held" else process_bytes
            self.admission.update(self._headroom(guard, used))
        if closed and self.settings.file is not None:
            await self._save_quietly(self.settings.file)

    # -- the fit ---------------------------------------------------------------------------

    @property
    def observations(self) -> tuple[Observation, ...]:
        """The ring, oldest first."""
        return tuple(self._observations)

    def add_observation(self, observation: Observation) -> None:
        """Add an observation made elsewhere (another replica, a load test); refits lazily."""
        self._observations.append(observation)
        self._fit_stale = True

    def current_fit(self) -> QuotaFit | None:
        """The fit of the ring (refitted once per new window), or None (see :attr:`fit_error`)."""
        if self._fit_stale:
            self._fit_stale = False
            try:
                self._fit, self._fit_error = fit(self._observations,
                                                 target=self.settings.target), None
            except QuotaFitError as exc:
                self._fit, self._fit_error = None, str(exc)
        return self._fit

    @property
    def fit_error(self) -> str | None:
        """Why there is no fit, or None when there is one."""
        self.current_fit()
        return self._fit_error

    def session_seconds(self) -> float | None:
        """``D``: measured mean session duration over the ring, else the configured one."""
        return mean_session_seconds(self.observations) or self.settings.session_seconds

    def _headroom(self, guard: Guard, used_bytes: int) -> Headroom | None:
        model = self.current_fit()
        limit = _limit_bytes(guard, self.settings.target)
        window = self._window
        context = window.mean_context if window is not None else None
        if context is None and self._observations:
            context = self._observations[-1].context_tokens
        duration = self.session_seconds()
        if model is None or limit is None or context is None or not duration:
            return None
        per_session = model.session_bytes(context, duration)
        if not per_session:
            return None
        return Headroom(used_bytes, guard.config.evict_at * limit, per_session)

    def _admission_check(self) -> str | None:
        try:
            return self.admission.check()
        except Exception:  # never break admission: a guard bug admits
            guard = self._guard() if self._guard is not None else None
            if guard is not None:
                guard.record_internal_error("quota admission")
            return None

    # -- documents -------------------------------------------------------------------------

    def document(self) -> QuotaDocument:
        """Observations, limit, evict threshold and the current fit (route and file format)."""
        guard = self._guard() if self._guard is not None else None
        model = self.current_fit()
        return QuotaDocument(
            self.observations, self.settings.target,
            limit_bytes=_limit_bytes(guard, self.settings.target) if guard else None,
            evict_at=guard.config.evict_at if guard else None,
            window_seconds=self.settings.window,
            mean_session_seconds=self.session_seconds(),
            extra={"fit": model.to_dict() if model else None, "fit_error": self._fit_error},
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`document` to ``path`` as JSON (atomically)."""
        write_document(path, self.document())

    def load(self, path: str | os.PathLike[str]) -> int:
        """Append the observations saved in ``path`` (the ring keeps the newest); their count.

        Raises:
            ConfigError: The file cannot be read or does not parse; the message names it.
        """
        loaded = read_document(path).observations
        for observation in loaded:
            self.add_observation(observation)
        return len(loaded)

    async def _save_quietly(self, path: str) -> None:
        document = self.document()  # built on the loop; only the write runs in a thread
        try:
            await asyncio.to_thread(write_document, path, document)
        except OSError as exc:
            self.save_errors_total += 1
            logger.warning("llm-guard quota: cannot write %s: %s", path, exc)

    def status_section(self) -> dict[str, Any]:
        """The ``quota`` section of the status document."""
        model = self.current_fit()
        window = self._window
        return {
            "window_seconds": self.settings.window,
            "target": self.settings.target,
            "observations": len(self._observations),
            "ring_size": self.settings.ring_size,
            "windows_total": self.windows_total,
            "windows_skipped": dict(self.windows_skipped),
            "current_window": None if window is None else {
                "requests": window.requests,
                "mean_context_tokens": window.mean_context,
                "age_seconds": round(self.clock() - window.started_at, 3),
            },
            "mean_session_seconds": self.session_seconds(),
            "fit": model.to_dict() if model else None,
            "fit_error": self._fit_error,
            "invalid_reports_total": self.invalid_reports_total,
            "save_errors_total": self.save_errors_total,
            "admission": {"enabled": self.settings.admission, **self.admission.describe()},
        }

    def _route(self, query: dict[str, list[str]]) -> tuple[int, Any]:
        return 200, self.document().to_dict()


def _process_bytes(guard: Guard) -> int:
    """The process reading, or the highest reading when the guard polls no process source."""
    readings = guard.readings
    process = readings.get("process")
    if process is not None:
        return process.used_bytes
    return max((r.used_bytes for r in readings.values()), default=0)


def _limit_bytes(guard: Guard, target: str) -> int | None:
    """The limit the evict watermark applies to for ``target``."""
    process = guard.readings.get("process")
    if target == "process" and process is not None and process.limit_bytes:
        return process.limit_bytes
    return guard.limit_bytes
