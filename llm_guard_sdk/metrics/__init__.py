"""Prometheus metrics (the ``prometheus`` extra): the ``"metrics"`` extension.

* :class:`GuardMetrics`: registers the metrics of one guard (a private registry by default)
  and serves ``GET /llm-guard/metrics``; on by default when prometheus-client is installed
  (``LLM_GUARD_METRICS=auto|1|0``).
* :mod:`.families`: every metric (names in docs/metrics.md); :mod:`.publish`: how the guard's
  figures reach them (tick, close, tick-sampled latencies); :mod:`.exposition`: rendering, also
  across workers (``PROMETHEUS_MULTIPROC_DIR``).

Only this package imports prometheus-client; without it, importing it raises
:class:`MetricsDependencyError` with the pip command.
"""

from llm_guard_sdk.metrics.deps import MetricsDependencyError, require_prometheus

require_prometheus()

from llm_guard_sdk.metrics.exposition import render, sweep_dead_workers  # noqa: E402
from llm_guard_sdk.metrics.extension import GuardMetrics  # noqa: E402
from llm_guard_sdk.metrics.families import PREFIX, GuardFamilies  # noqa: E402
from llm_guard_sdk.metrics.histograms import WeightedHistogram  # noqa: E402
from llm_guard_sdk.metrics.publish import LabelCap, MetricsPublisher  # noqa: E402

__all__ = [
    "PREFIX",
    "GuardFamilies",
    "GuardMetrics",
    "LabelCap",
    "MetricsDependencyError",
    "MetricsPublisher",
    "WeightedHistogram",
    "render",
    "sweep_dead_workers",
]
