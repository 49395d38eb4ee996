"""The exposed families: names, types, labels and help; the weighted histogram."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from llm_guard_sdk.metrics import PREFIX, GuardMetrics, WeightedHistogram
from tests.metrics.support import metrics_guard, parse

EXPECTED = {  # name (as parsed) -> type, label names
    "memory_used_bytes": ("gauge", {"source"}),
    "memory_limit_bytes": ("gauge", {"source"}),
    "memory_pressure_ratio": ("gauge", {"source"}),
    "level": ("gauge", set()),
    "threshold_ratio": ("gauge", {"level"}),
    "sessions": ("gauge", {"state"}),
    "streams_open": ("gauge", set()),
    "session_held_bytes": ("histogram", {"le"}),
    "sessions_opened": ("counter", set()),
    "internal_errors": ("counter", set()),
    "heap_trims": ("counter", set()),
    "heap_trim_freed_bytes": ("counter", set()),
    "time_to_first_token_seconds": ("histogram", {"le"}),
    "inter_chunk_seconds": ("histogram", {"le"}),
}
LABELLED_COUNTERS = {  # families whose series appear once something happened
    "evictions": {"reason"}, "shed": {"protocol", "reason"}, "streams": {"outcome"},
    "leaks": {"kind"}, "sessions_closed": {"reason"}, "breaker_refused": {"backend"},
    "tenant_sessions": {"tenant"}, "tenant_held_bytes": {"tenant"},
    "breaker_state": {"backend"},
}


def test_every_family_has_its_type_labels_and_help() -> None:
    guard, metrics = metrics_guard()
    metrics.tick(guard)
    families = parse(metrics.render().decode())
    for short, (kind, labels) in EXPECTED.items():
        family = families[PREFIX + short]
        assert family.type == kind, short
        assert len(family.documentation) > 20, short
        assert family.samples, short
        for sample in family.samples:
            assert set(sample.labels) <= labels, (short, sample.labels)
    for short in LABELLED_COUNTERS:
        assert PREFIX + short in families, short  # declared (HELP/TYPE) even without series
    names = {n for n in families if not n.endswith("_created")}  # prometheus-client's own
    assert names <= {PREFIX + n for n in (*EXPECTED, *LABELLED_COUNTERS)}
    text = metrics.render().decode()
    assert "llm_guard_sessions_opened_total 0.0" in text  # conventional suffixes on the wire
    assert 'llm_guard_threshold_ratio{level="shed"} 0.92' in text


def test_each_guard_has_its_own_registry_and_one_can_be_injected() -> None:
    first, second = GuardMetrics(), GuardMetrics()
    assert first.registry is not second.registry  # no global state shared between guards
    mine = CollectorRegistry()
    guard, metrics = metrics_guard(metrics=GuardMetrics(registry=mine))
    metrics.tick(guard)
    assert mine.get_sample_value("llm_guard_level") == 0.0
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        GuardMetrics(registry=mine)  # one guard per registry


@pytest.mark.parametrize(("value", "weight"), [(0.003, 1), (0.2, 7), (1.0, 3), (500.0, 2),
                                               (0.25, 1)])
def test_a_weighted_observation_equals_repeated_ones(value: float, weight: int) -> None:
    registry = CollectorRegistry()
    weighted = WeightedHistogram("w", "weighted", registry=registry, buckets=(0.01, 0.25, 1.0))
    plain = WeightedHistogram("p", "plain", registry=registry, buckets=(0.01, 0.25, 1.0))
    weighted.observe_weighted(value, weight)
    weighted.observe_weighted(value, 0)  # no-op
    for _ in range(weight):
        plain.observe(value)
    for le in ("0.01", "0.25", "1.0", "+Inf"):
        assert registry.get_sample_value("w_bucket", {"le": le}) == \
            registry.get_sample_value("p_bucket", {"le": le})
    assert registry.get_sample_value("w_sum") == pytest.approx(value * weight)
    assert registry.get_sample_value("w_count") == weight


def test_an_extension_given_to_the_guard_replaces_the_switched_on_one() -> None:
    mine = GuardMetrics()
    guard, metrics = metrics_guard(metrics=mine)  # LLM_GUARD_METRICS=auto: on
    assert metrics is mine and guard.extension("metrics") is mine
    assert guard.tick_hooks.count(mine.tick) == 1
