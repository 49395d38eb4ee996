"""Adaptive stream timeouts: P99 of what each route measured, times a factor, clamped, jittered.

Static ``chunk_timeout`` values are either too long for a fast route (a stuck stream holds its
KV cache for half a minute) or too short for a slow one (healthy long prompts are cut). This
extension learns, per route (and per tenant when a tenant function is given), the distribution
of the time to first token and of the gap between chunks, and gives :class:`StreamTimeouts`
the limit ``clamp(P99 * p99_factor, min_timeout, max_timeout) + jitter`` for each stream. Until
a route has ``min_samples`` values the static ``chunk_timeout`` applies (today's behaviour).

**Where the samples come from.** :class:`~llm_guard_sdk.actions.progress.StreamProgress`
(the guard's ``progress``, always on) samples every open stream on the tick, reading no clock on
the hot path; this extension listens to it and files each sample under the stream's route. See
that module for how chunks that arrived between two ticks become latencies; they only matter
below ``min_timeout`` anyway, which should stay several ticks long.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from llm_guard_sdk.actions.latency import RollingQuantile
from llm_guard_sdk.actions.progress import StreamProgress, StreamTrack
from llm_guard_sdk.session import Session, SessionStream
from llm_guard_sdk.settings import BOOL_FORM, COUNT, NON_NEGATIVE, POSITIVE, Rule, Settings, flag

__all__ = ["AdaptiveTimeoutSettings", "AdaptiveTimeouts", "RouteLatency"]

logger = logging.getLogger("llm_guard_sdk")

QUANTILE = 0.99
OTHER = "(other)"  # the key of every route past ``max_keys``
_REFRESH = 1.0  # seconds between two recomputations of one route's quantiles
_MAX_LABEL = 128


@dataclass(frozen=True, slots=True)
class AdaptiveTimeoutSettings(Settings):
    """Settings of the adaptive timeouts, from keyword arguments or ``LLM_GUARD_TIMEOUT_*``.

    Off by default: cold, it keeps today's behaviour (the static ``chunk_timeout``, none by
    default), but once warm it cuts streams that stall past ``max_timeout`` (45 s), which
    today's default never does; a deployment opts in with ``LLM_GUARD_ADAPTIVE_TIMEOUTS=1``.
    """

    ENV_PREFIX: ClassVar[str] = "LLM_GUARD_TIMEOUT_"
    ENV_NAME_EXCEPTIONS: ClassVar[Mapping[str, str]] = MappingProxyType({
        "enabled": "LLM_GUARD_ADAPTIVE_TIMEOUTS",
        "min_timeout": "LLM_GUARD_TIMEOUT_MIN",
        "max_timeout": "LLM_GUARD_TIMEOUT_MAX",
    })
    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({
        "enabled": Rule(flag, BOOL_FORM),
        "min_timeout": Rule(POSITIVE, "expected seconds > 0 and <= {max_timeout}, e.g. 2"),
        "max_timeout": Rule(POSITIVE, "expected seconds > 0 and >= {min_timeout}, e.g. 45"),
        "p99_factor": Rule(POSITIVE, "expected a factor > 0, e.g. 1.5"),
        "jitter": Rule(NON_NEGATIVE, "expected seconds >= 0, e.g. 0.5"),
        "min_samples": Rule(COUNT, "expected an integer >= 1, e.g. 100"),
        "window": Rule(POSITIVE, "expected seconds > 0, e.g. 300"),
        "max_keys": Rule(COUNT, "expected an integer >= 1, e.g. 64"),
    })

    enabled: bool = False
    min_timeout: float = 2.0
    max_timeout: float = 45.0
    p99_factor: float = 1.5
    jitter: float = 0.5
    min_samples: int = 100
    window: float = 300.0
    max_keys: int = 64

    def validate(self) -> None:
        """The clamp bounds must not be inverted; the one the user changed is blamed."""
        if self.min_timeout > self.max_timeout:
            blamed = "min_timeout" if self.max_timeout == 45.0 else "max_timeout"
            accepted = (f"the clamp bounds are inverted: {{min_timeout}} ({self.min_timeout}) "
                        f"must be <= {{max_timeout}} ({self.max_timeout})")
            raise self.field_error(blamed, getattr(self, blamed), accepted)

    def clamp(self, p99: float) -> float:
        """The timeout for a measured P99, before jitter."""
        return min(max(p99 * self.p99_factor, self.min_timeout), self.max_timeout)


class _Metric:
    """One rolling distribution and the timeout last derived from it."""

    __slots__ = ("p99", "quantiles", "timeout")

    def __init__(self, window: float, now: float) -> None:
        self.quantiles = RollingQuantile(window, low=1e-3, high=1e3, now=now)
        self.p99: float | None = None
        self.timeout: float | None = None  # None: cold, the static bound applies

    def refresh(self, settings: AdaptiveTimeoutSettings) -> None:
        self.p99 = self.quantiles.quantile(QUANTILE)
        warm = self.p99 is not None and self.quantiles.count >= settings.min_samples
        self.timeout = settings.clamp(self.p99) if warm and self.p99 is not None else None

    def status(self, static: float | None) -> dict[str, Any]:
        return {
            "p99": None if self.p99 is None else round(self.p99, 4),
            "samples": self.quantiles.count,
            "timeout": self.timeout if self.timeout is not None else static,
            "source": "static" if self.timeout is None else "adaptive",
        }


class RouteLatency:
    """Time to first token and inter-chunk gaps of one route (or route and tenant)."""

    __slots__ = ("counted", "first_token", "inter_chunk", "refreshed_at")

    def __init__(self, window: float, now: float) -> None:
        self.first_token = _Metric(window, now)
        self.inter_chunk = _Metric(window, now)
        self.counted = 0  # samples at the last refresh
        self.refreshed_at = now

    def tick(self, now: float, settings: AdaptiveTimeoutSettings) -> None:
        """Rotate the windows; recompute the timeouts if samples came and a second passed."""
        rotated = self.first_token.quantiles.rotate(now)
        rotated = self.inter_chunk.quantiles.rotate(now) or rotated
        counted = self.first_token.quantiles.count + self.inter_chunk.quantiles.count
        if rotated or (counted != self.counted and now - self.refreshed_at >= _REFRESH):
            self.first_token.refresh(settings)
            self.inter_chunk.refresh(settings)
            self.counted, self.refreshed_at = counted, now


class _Tracked:
    """What this extension keeps per stream (in the progress track): its route and jitter."""

    __slots__ = ("jitter", "route")

    def __init__(self, route: RouteLatency, jitter: float) -> None:
        self.route = route
        self.jitter = jitter


class AdaptiveTimeouts:
    """The ``"timeouts"`` extension: learns latencies per route, gives per-stream limits.

    ``Guard(config, extensions=[AdaptiveTimeouts(settings)])`` or ``extensions=["timeouts"]``
    (settings from ``LLM_GUARD_TIMEOUT_*``). It serves the ``timeouts`` status section and, when
    enabled, hands :class:`~llm_guard_sdk.actions.StreamTimeouts` the limit of each stream.

    Args:
        settings: Defaults to :meth:`AdaptiveTimeoutSettings.from_env`.
        tenant: ``tenant(session)`` returns the tenant key, or None; a key per route and
            tenant is kept while fewer than ``max_keys`` exist. One that raises counts as None.
        rng: Draws the jitter (seed it in tests).
    """

    name = "timeouts"

    def __init__(self, settings: AdaptiveTimeoutSettings | None = None, *,
                 tenant: Callable[[Session], str | None] | None = None,
                 rng: random.Random | None = None) -> None:
        self.settings = settings if settings is not None else AdaptiveTimeoutSettings.from_env()
        self.tenant = tenant
        self.rng = rng if rng is not None else random.Random()
        self.routes: dict[tuple[str, str | None], RouteLatency] = {}
        self.static_chunk_timeout: float | None = None
        self.static_stream_timeout: float | None = None
        self.tenant_errors_total = 0
        # Until set up on a guard, a progress tracker of its own; then the guard's. Either way
        # begin/end_tick announce the tick to it (idempotent when the guard's timeouts did).
        self.progress = StreamProgress()
        self.progress.add_listener(self)

    def setup(self, guard: Any) -> None:
        """Serve the status section; when enabled, give the guard's timeouts our limits."""
        config = guard.config
        self.static_chunk_timeout = config.chunk_timeout
        self.static_stream_timeout = config.stream_timeout
        guard.add_status_section("timeouts", self.status)
        if not self.settings.enabled and getattr(config, "adaptive_timeouts", False):
            # The core's switch (GuardConfig.adaptive_timeouts) loaded us: apply, too.
            origin = config.provenance()["adaptive_timeouts"]
            self.settings = self.settings.replace(enabled=True, origin=origin)
        if not self.settings.enabled:
            return
        self.progress = guard.progress
        self.progress.add_listener(self)
        guard.timeouts.use_limits(self)
        if self.settings.min_timeout < 4 * config.sample_interval:
            logger.warning("llm-guard adaptive timeouts: min_timeout %.3gs is under four "
                           "sample intervals (%.3gs): timeouts and gaps are measured per tick",
                           self.settings.min_timeout, config.sample_interval)

    # -- called by StreamTimeouts on every tick -------------------------------------------------

    def begin_tick(self, now: float) -> None:
        """Rotate windows and refresh the timeouts that new samples changed."""
        self.progress.begin_tick(now)
        settings = self.settings
        for route in self.routes.values():
            route.tick(now, settings)

    def limit(self, session: Session, stream: SessionStream, now: float,
              static: float | None) -> float | None:
        """Record what ``stream`` did since the last tick; return its chunk limit (s) or None."""
        track: StreamTrack = self.progress.visit(session, stream, now)
        tracked = track.state.get(self)
        if not isinstance(tracked, _Tracked):  # seen before this extension listened
            tracked = track.state[self] = self.track(session, stream, now)
        route = tracked.route
        timeout = (route.inter_chunk if stream.chunks else route.first_token).timeout
        return static if timeout is None else timeout + tracked.jitter

    def end_tick(self, now: float) -> None:
        """Forget streams the tick did not see (they ended)."""
        self.progress.end_tick(now)

    # -- progress listener ----------------------------------------------------------------------

    def track(self, session: Session, stream: SessionStream, now: float) -> _Tracked:
        """A new stream: its route, and its jitter drawn once."""
        jitter = self.rng.uniform(0.0, self.settings.jitter) if self.settings.jitter else 0.0
        return _Tracked(self._route_of(session, now), jitter)

    def record(self, state: Any, lead: float, first_token: bool, share: float,
               repeats: int) -> None:
        """File a stream's samples of one tick under its route."""
        if not isinstance(state, _Tracked):
            return
        route = state.route
        gaps = route.inter_chunk.quantiles.current
        (route.first_token.quantiles.current if first_token else gaps).add(lead)
        if repeats > 0:
            gaps.add(share, repeats)

    # -- keys and status ------------------------------------------------------------------------

    def _route_of(self, session: Session, now: float) -> RouteLatency:
        path = (session.path or "-")[:_MAX_LABEL]
        tenant: str | None = None
        if self.tenant is not None:
            try:
                found = self.tenant(session)
                tenant = None if found is None else str(found)[:_MAX_LABEL]
            except Exception:
                self.tenant_errors_total += 1
        routes = self.routes
        for key in ((path, tenant), (path, None), (OTHER, None)):
            route = routes.get(key)
            if route is None and (len(routes) < self.settings.max_keys or key[0] == OTHER):
                route = routes[key] = RouteLatency(self.settings.window, now)
            if route is not None:
                return route
        raise AssertionError("unreachable: the (other) key is always created")

    def status(self) -> dict[str, Any]:
        """The ``timeouts`` status section: settings, and per route p99s, timeouts, samples."""
        s = self.settings
        routes: dict[str, Any] = {}
        for (path, tenant), route in self.routes.items():
            label = path if tenant is None else f"{path} tenant={tenant}"
            routes[label] = {
                "first_token": route.first_token.status(self.static_chunk_timeout),
                "inter_chunk": route.inter_chunk.status(self.static_chunk_timeout),
            }
        return {
            "adaptive": s.enabled,
            "min_timeout": s.min_timeout,
            "max_timeout": s.max_timeout,
            "p99_factor": s.p99_factor,
            "jitter": s.jitter,
            "min_samples": s.min_samples,
            "window": s.window,
            "stream_timeout": self.static_stream_timeout,
            "streams_tracked": self.progress.tracked,
            "tenant_errors_total": self.tenant_errors_total,
            "routes": routes,
        }
