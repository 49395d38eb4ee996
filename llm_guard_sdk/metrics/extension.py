"""``GuardMetrics``: the ``"metrics"`` extension that wires the metrics into one guard."""

from __future__ import annotations

import os
import time
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from llm_guard_sdk.hooks import ControlBody
from llm_guard_sdk.metrics.exposition import mark_dead, multiprocess_dir, render, sweep_dead_workers
from llm_guard_sdk.metrics.families import GuardFamilies
from llm_guard_sdk.metrics.publish import MetricsPublisher

__all__ = ["GuardMetrics"]

SWEEP_INTERVAL = 60.0
"""Seconds between two looks for killed workers' files in multiprocess mode."""


class GuardMetrics:
    """Prometheus metrics of one guard, served at ``GET /llm-guard/metrics`` (status auth).

    On by default when prometheus-client is installed (``LLM_GUARD_METRICS=auto``); pass one
    to ``Guard(..., extensions=[GuardMetrics(registry=...)])`` to choose the registry.

    Args:
        registry: Where the metrics are registered: a private ``CollectorRegistry`` per guard
            when None (no global state); ``prometheus_client.REGISTRY`` to show them on an
            existing ``/metrics`` (``make_asgi_app()``). One guard per registry.
        max_label_values: Distinct values kept per label (reasons, outcomes, backends,
            tenants) before new ones count as ``other``.
        slow_interval: Seconds between refreshes of the tenant, breaker and leak figures.
        multiprocess_dir: The multiprocess directory; by default ``PROMETHEUS_MULTIPROC_DIR``
            (it must be set before prometheus-client is imported, as prometheus-client wants).
    """

    name = "metrics"

    def __init__(self, registry: CollectorRegistry | None = None, *,
                 max_label_values: int = 64, slow_interval: float = 5.0,
                 multiprocess_dir: str | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.directory = multiprocess_dir
        self.families = GuardFamilies.build(self.registry)
        self.publisher = MetricsPublisher(self.families, max_label_values=max_label_values,
                                          slow_interval=slow_interval)
        self._swept_at = float("-inf")

    @classmethod
    def of(cls, guard: Any) -> GuardMetrics:
        """The guard's metrics extension, set up (with a private registry) on first use."""
        found = guard.add_extension(cls.name)
        if not isinstance(found, GuardMetrics):
            raise TypeError(f"the guard's {cls.name!r} extension is a {type(found).__name__}")
        return found

    def setup(self, guard: Any) -> None:
        """Register the tick, close and stop hooks, the latency listener and the route."""
        if self.directory is None:
            self.directory = multiprocess_dir()
        guard.add_tick_hook(self.tick)
        guard.add_close_hook(self.publisher.session_closed(guard.registry))
        guard.progress.add_listener(self.publisher)
        guard.add_stop_hook(self.stopped)
        guard.add_control_route("/metrics", self.route)
        self.publisher.tick(guard)  # the first scrape already has every figure

    def tick(self, guard: Any) -> None:
        """Update the figures; in multiprocess mode, now and then sweep killed workers."""
        self.publisher.tick(guard)
        if self.directory is not None:
            now = time.monotonic()
            if now - self._swept_at >= SWEEP_INTERVAL:
                self._swept_at = now
                sweep_dead_workers(self.directory, alive=os.getpid())

    def render(self) -> bytes:
        """The Prometheus text format (all workers' ``llm_guard_*`` in multiprocess mode)."""
        return render(self.registry, self.directory)

    def route(self, query: dict[str, list[str]]) -> tuple[int, ControlBody]:
        """``GET /llm-guard/metrics``."""
        return 200, ControlBody(self.render(), CONTENT_TYPE_LATEST)

    def stopped(self) -> None:
        """The guard stopped (app shutdown): in multiprocess mode, mark this worker dead."""
        if self.directory is not None:
            mark_dead(os.getpid(), self.directory)
