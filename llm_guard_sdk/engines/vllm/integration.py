"""Connecting one engine to a :class:`~llm_guard_sdk.guard.Guard`.

:class:`VLLMGuard` adds what the guard needs on top of :class:`VLLMStreams`: the KV cache as an
advisory pressure source, refusing new engine requests while the engine is in trouble, the
guard's circuit breaker and degrade hook when those extensions are on, and a ``vllm`` section in
the status document. :func:`stream_vllm` finds the integration registered on the serving guard,
so handlers only name the engine.

Engine trouble never sheds the app: every refusal here is of a new *engine* request (503,
``Retry-After``), asked when its stream starts, and other routes are untouched. In order: the
breaker ``"vllm"`` is open (``circuit_open``, see :mod:`llm_guard_sdk.breakers`); the engine is
dead (``engine_dead``, which also trips the breaker); more requests wait in its queue than
``max_waiting_requests`` (``engine_queue_full``); the KV cache is at or above the shed
threshold (``kv_cache_pressure``: the KV source is advisory and does not set the guard's level).
Requests already running continue.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llm_guard_sdk.breakers import Breakers, CircuitBreaker
from llm_guard_sdk.degrade import Degrader, DegradeRequest
from llm_guard_sdk.errors import BackendError, BackendOverloadedError, BackendUnavailableError
from llm_guard_sdk.guard import Guard, current_guard
from llm_guard_sdk.policy import Level, WatermarkPolicy
from llm_guard_sdk.session import Session
from llm_guard_sdk.stream import GuardedStream

from .kv import KV_SOURCE, KVCacheSource, KVStats, kv_capacity_bytes
from .settings import VLLMSettings
from .streaming import VLLMStreams

logger = logging.getLogger("llm_guard_sdk")

KV_MISSING = (
    "llm-guard: vLLM requests ran but no KV-cache statistics arrived: the engine was built "
    "without the guard's stat logger, so KV pressure, admission and status stay at zero. "
    "Build it with: engine = AsyncLLM.from_engine_args(engine_args, "
    "stat_loggers=[kv.logger_factory()]) where kv = KVStats(), and pass VLLMGuard(engine, "
    "guard, kv=kv)")
"""Logged once per integration when requests finished and the stat logger never reported."""

KV_PRESSURE = "kv_cache_pressure"
"""The reason of a refused engine request while the KV cache is full."""
BREAKER = "vllm"
"""The name of the engine's breaker in the guard's ``breakers`` extension."""


class VLLMGuard(VLLMStreams):
    """Connects one ``AsyncLLM`` to a :class:`Guard`: KV source, backpressure, status, aborts.

    A :class:`VLLMStreams` (``stream``, ``abort``, the counters) that also registers itself on
    ``guard``: without a guard it only streams.
    """

    name = "vllm"
    """The guard keeps it as its ``"vllm"`` extension."""

    def __init__(self, engine: Any, guard: Guard | None = None, *, kv: KVStats | None = None,
                 max_waiting_requests: int | None = None, kv_evicts: bool = False,
                 settings: VLLMSettings | None = None,
                 fallbacks: dict[str, Any] | None = None) -> None:
        super().__init__(engine, fallbacks=fallbacks)
        self.kv = kv if kv is not None else KVStats()
        self.max_waiting_requests = max_waiting_requests
        self.settings = settings
        self._kv_evicts = kv_evicts
        self.guard: Guard | None = None
        self.kv_policy: WatermarkPolicy | None = None
        """The KV cache's own level (the guard's thresholds and hysteresis), once set up."""
        self.refused_by_reason: dict[str, int] = {}
        self._kv_warned = False
        if guard is not None:
            guard.add_extension(self)

    def setup(self, guard: Guard) -> None:
        """Register the KV-cache source, the KV level's tick hook and the status section."""
        if self.max_waiting_requests is None:  # the argument, else the settings (environment)
            settings = self.settings if self.settings is not None else VLLMSettings()
            self.max_waiting_requests = settings.max_waiting_requests
        self.guard = guard
        self.kv_policy = WatermarkPolicy(guard.policy.thresholds)
        guard.add_source(KVCacheSource(self), evicts=self._kv_evicts)
        guard.add_tick_hook(self._follow_kv)
        guard.add_status_section(self.name, self.status)

    def _follow_kv(self, guard: Guard) -> None:
        self.kv_level()  # every tick, so hysteresis sees each reading
        self._check_kv_feed()

    def _check_kv_feed(self) -> None:
        """Say once, with the line to add, when requests ran but no KV statistics came."""
        if self._kv_warned or self.kv.records_total:
            return
        if self.completed_total + self.aborted_total + self.errors_total == 0:
            return  # no request has run a step yet: nothing to expect
        self._kv_warned = True
        logger.warning(KV_MISSING)

    def kv_level(self) -> Level:
        """The KV cache's level from its latest reading (NORMAL before set-up or a reading)."""
        if self.guard is None or self.kv_policy is None:
            return Level.NORMAL
        return self.kv_policy.update(self.guard.sampler.pressure_of(KV_SOURCE) or 0.0)

    def admission_error(self) -> BackendError | None:
        """Refuse a new engine request while the engine is dead, its queue or KV cache full."""
        retry_after = self.guard.config.retry_after if self.guard is not None else None
        error: BackendError
        if getattr(self.engine, "errored", False):
            error = BackendUnavailableError("the vLLM engine is dead; retry later",
                                            reason="engine_dead", retry_after=retry_after)
        elif (self.max_waiting_requests is not None
              and self.kv.num_waiting_reqs > self.max_waiting_requests):
            error = BackendOverloadedError("too many requests wait for the model; retry later",
                                           reason="engine_queue_full", retry_after=retry_after)
        elif self.kv_level() >= Level.SHED:
            error = BackendOverloadedError("the model's KV cache is full; retry later",
                                           reason=KV_PRESSURE, retry_after=retry_after)
        else:
            return None
        return self.refused(error)

    def refused(self, error: BackendError) -> BackendError:
        """Count a refused engine request by reason."""
        reason = error.reason or "refused"
        self.refused_by_reason[reason] = self.refused_by_reason.get(reason, 0) + 1
        return error

    def breaker(self) -> CircuitBreaker | None:
        """The breaker ``"vllm"`` of the guard's ``breakers`` extension, when it is enabled."""
        breakers = self.guard.extension(Breakers.name) if self.guard is not None else None
        return breakers.get(BREAKER) if isinstance(breakers, Breakers) else None

    def degrade(self, request: DegradeRequest) -> DegradeRequest:
        """The guard's degrade hook, at the higher of the guard's level and the KV cache's."""
        degrader = Degrader.of(self.guard)
        if degrader is None or self.guard is None:
            return request
        return degrader.apply(request, pressure=self.guard.sampler.pressure_of(KV_SOURCE),
                              level=self.kv_level())

    def kv_capacity_bytes(self) -> int | None:
        """Total KV-cache bytes (blocks x block size x bytes per token), once known."""
        return kv_capacity_bytes(self.engine, self.bytes_per_token)

    def status(self) -> dict[str, Any]:
        """The ``vllm`` section of the status document."""
        return {
            "running": self.kv.num_running_reqs,
            "waiting": self.kv.num_waiting_reqs,
            "kv_cache_usage": round(self.kv.kv_cache_usage, 4),
            "kv_stats_records": self.kv.records_total,
            "unfinished": self.unfinished(),
            "inflight": len(self.inflight_ids()),
            "requests_total": self.requests_total,
            "completed_total": self.completed_total,
            "aborted_total": self.aborted_total,
            "errors_total": self.errors_total,
            "errors_by_status": {str(k): v for k, v in sorted(self.errors_by_status.items())},
            "kv_level": self.kv_level().label,
            "refused_by_reason": dict(self.refused_by_reason),
            "kv_bytes_per_token": self.bytes_per_token,
            "kv_capacity_bytes": self.kv_capacity_bytes(),
            "max_waiting_requests": self.max_waiting_requests,
        }


def stream_vllm(engine: Any, prompt: str | Sequence[int] | None = None,
                sampling_params: Any = None, *, request_id: str | None = None,
                messages: Sequence[dict[str, str]] | None = None,
                session: Session | None = None, **generate_kwargs: Any) -> GuardedStream[str]:
    """Stream text deltas from ``engine``, aborted when the client goes.

    Uses the :class:`VLLMGuard` registered on the current guard for ``engine`` (status,
    KV accounting); outside one, a private one without a guard is used. ``generate_kwargs``
    (``lora_request``, ``priority``, ``trace_headers``, ...) go to ``AsyncLLM.generate``.
    """
    guard = current_guard()
    integration = guard.extension("vllm") if guard is not None else None
    if not isinstance(integration, VLLMGuard) or integration.engine is not engine:
        integration = VLLMGuard(engine)
    return integration.stream(prompt, sampling_params, request_id=request_id,
                              messages=messages, session=session, **generate_kwargs)
