"""Connecting one engine to a :class:`~llm_guard_sdk.guard.Guard`.

:class:`VLLMGuard` adds what the guard needs on top of :class:`VLLMStreams`: the KV cache as a
pressure source, shedding new sessions while the engine's waiting queue is too long or the
engine is dead, and a ``vllm`` section in the status document. :func:`stream_vllm` finds the
integration registered on the serving guard, so handlers only name the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llm_guard_sdk.guard import Guard, current_guard
from llm_guard_sdk.session import Session
from llm_guard_sdk.stream import GuardedStream

from .kv import KVCacheSource, KVStats, kv_capacity_bytes
from .settings import VLLMSettings
from .streaming import VLLMStreams


class VLLMGuard(VLLMStreams):
    """Connects one ``AsyncLLM`` to a :class:`Guard`: KV source, backpressure, status, aborts.

    A :class:`VLLMStreams` (``stream``, ``abort``, the counters) that also registers itself on
    ``guard``: without a guard it only streams.
    """

    name = "vllm"
    """The guard keeps it as its ``"vllm"`` extension."""

    def __init__(self, engine: Any, guard: Guard | None = None, *, kv: KVStats | None = None,
                 max_waiting_requests: int | None = None, kv_evicts: bool = False,
                 settings: VLLMSettings | None = None) -> None:
        super().__init__(engine)
        self.kv = kv if kv is not None else KVStats()
        self.max_waiting_requests = max_waiting_requests
        self.settings = settings
        self._kv_evicts = kv_evicts
        if guard is not None:
            guard.add_extension(self)

    def setup(self, guard: Guard) -> None:
        """Register the KV-cache source, the admission check and the status section."""
        if self.max_waiting_requests is None:  # the argument, else the settings (environment)
            settings = self.settings if self.settings is not None else VLLMSettings()
            self.max_waiting_requests = settings.max_waiting_requests
        guard.add_source(KVCacheSource(self), evicts=self._kv_evicts)
        guard.add_admission_check(self._admission)
        guard.add_status_section(self.name, self.status)

    def kv_capacity_bytes(self) -> int | None:
        """Total KV-cache bytes (blocks x block size x bytes per token), once known."""
        return kv_capacity_bytes(self.engine, self.bytes_per_token)

    def _admission(self) -> str | None:
        if getattr(self.engine, "errored", False):
            return "engine_dead"
        limit = self.max_waiting_requests
        if limit is not None and self.kv.num_waiting_reqs > limit:
            return "engine_queue_full"
        return None

    def status(self) -> dict[str, Any]:
        """The ``vllm`` section of the status document."""
        return {
            "running": self.kv.num_running_reqs,
            "waiting": self.kv.num_waiting_reqs,
            "kv_cache_usage": round(self.kv.kv_cache_usage, 4),
            "unfinished": self.unfinished(),
            "inflight": len(self.inflight_ids()),
            "requests_total": self.requests_total,
            "completed_total": self.completed_total,
            "aborted_total": self.aborted_total,
            "errors_total": self.errors_total,
            "kv_bytes_per_token": self.bytes_per_token,
            "kv_capacity_bytes": self.kv_capacity_bytes(),
            "max_waiting_requests": self.max_waiting_requests,
        }


def stream_vllm(engine: Any, prompt: str | Sequence[int] | None = None,
                sampling_params: Any = None, *, request_id: str | None = None,
                messages: Sequence[dict[str, str]] | None = None,
                session: Session | None = None) -> GuardedStream[str]:
    """Stream text deltas from ``engine``, aborted when the client goes.

    Uses the :class:`VLLMGuard` registered on the current guard for ``engine`` (status,
    KV accounting); outside one, a private one without a guard is used.
    """
    guard = current_guard()
    integration = guard.extension("vllm") if guard is not None else None
    if not isinstance(integration, VLLMGuard) or integration.engine is not engine:
        integration = VLLMGuard(engine)
    return integration.stream(prompt, sampling_params, request_id=request_id,
                              messages=messages, session=session)
