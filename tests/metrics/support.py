"""Scraping a guard's metrics in-process: parsed families and sample lookups."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from llm_guard_sdk import Guard
from llm_guard_sdk.metrics import GuardMetrics
from tests.support import FakeSource, make_guard


def metrics_guard(source: FakeSource | None = None, *, metrics: GuardMetrics | None = None,
                  **overrides: Any) -> tuple[Guard, GuardMetrics]:
    """A guard on ``source`` with an explicit metrics extension (it replaces auto's)."""
    extension = metrics if metrics is not None else GuardMetrics()
    guard = make_guard(source, extensions=[extension], **overrides)
    return guard, extension


def parse(text: str) -> dict[str, Any]:
    """Families by name, as Prometheus reads them (counters lose ``_total`` here)."""
    return {family.name: family for family in text_string_to_metric_families(text)}


def scrape(guard: Guard, metrics: GuardMetrics) -> list[Sample]:
    """Publish the guard's figures now (as its tick does), render and parse every sample."""
    metrics.tick(guard)
    return [s for family in parse(metrics.render().decode()).values() for s in family.samples]


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The one sample called ``name`` with exactly ``labels``, or None."""
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) <= 1, found
    return found[0] if found else None
