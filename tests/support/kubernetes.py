"""The manifests in ``deploy/kubernetes/`` as data, and the PromQL their autoscalers run.

Tests read the queries from the files themselves (never a copy), and render the
prometheus-adapter ``metricsQuery`` template the way the adapter does for a Pods metric
(``pkg/naming/metrics_query.go``, ``Build``): ``<<.Series>>`` is the series name,
``<<.LabelMatchers>>`` the namespace matcher then the pod matcher (``pod="a"`` for one pod,
``pod=~"a|b"`` for several), joined by commas, and ``<<.GroupBy>>`` the pod label.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from tests.support.server import ROOT

MANIFESTS = ROOT / "deploy" / "kubernetes"

Document = dict[str, Any]

_TEMPLATE_ACTION = re.compile(r"<<\s*(.*?)\s*>>")
_TEMPLATE_FIELDS = (".Series", ".LabelMatchers", ".GroupBy")


def documents(path: Path) -> list[Document]:
    """Every non-empty YAML document of one file (``yaml.safe_load_all``)."""
    with path.open() as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc is not None]


def manifest_files() -> list[Path]:
    """All ``*.yaml`` files under ``deploy/kubernetes/``, sorted."""
    return sorted(MANIFESTS.rglob("*.yaml"))


def find(path: Path, kind: str) -> Document:
    """The one document of ``kind`` in ``path``."""
    matches = [doc for doc in documents(path) if doc.get("kind") == kind]
    if len(matches) != 1:
        raise AssertionError(f"{path}: expected one {kind}, found {len(matches)}")
    return matches[0]


def containers(deployment: Document) -> list[Document]:
    containers: list[Document] = deployment["spec"]["template"]["spec"]["containers"]
    return containers


def env_of(container: Document) -> dict[str, Document]:
    """The container's env entries by name."""
    return {entry["name"]: entry for entry in container.get("env", [])}


def adapter_rules() -> list[Document]:
    """The prometheus-adapter rules (the ConfigMap's ``config.yaml``, itself YAML)."""
    config_map = find(MANIFESTS / "prometheus-adapter" / "adapter-config.yaml", "ConfigMap")
    rules: list[Document] = yaml.safe_load(config_map["data"]["config.yaml"])["rules"]
    return rules


def adapter_rule(metric: str) -> Document:
    """The rule whose ``name.as`` (the metric the HPA asks for) is ``metric``."""
    matching = [rule for rule in adapter_rules() if rule["name"]["as"] == metric]
    if len(matching) != 1:
        raise AssertionError(f"expected one adapter rule exposing {metric}, "
                             f"found {len(matching)}")
    return matching[0]


def keda_trigger() -> Document:
    """The ScaledObject's prometheus trigger."""
    scaled = find(MANIFESTS / "keda" / "scaledobject.yaml", "ScaledObject")
    triggers: list[Document] = [t for t in scaled["spec"]["triggers"] if t["type"] == "prometheus"]
    if len(triggers) != 1:
        raise AssertionError(f"expected one prometheus trigger, found {len(triggers)}")
    return triggers[0]


def scrape_job() -> Document:
    """The plain-Prometheus scrape job of ``monitoring/scrape-config.yaml``."""
    [config] = documents(MANIFESTS / "monitoring" / "scrape-config.yaml")
    [job] = config["scrape_configs"]
    return dict(job)


def annotation_label(annotation: str) -> str:
    """The discovery label Prometheus gives a pod annotation (every other character -> ``_``)."""
    return "__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", annotation)


def quantity(value: str | int | float) -> Decimal:
    """A plain Kubernetes quantity as a number: ``600m`` is 0.6, ``2`` is 2 (no binary suffixes)."""
    text = str(value)
    return Decimal(text[:-1]) / 1000 if text.endswith("m") else Decimal(text)


def _quote(value: str) -> str:
    """Go's ``%q`` for the label values used here (ASCII, no control characters)."""
    if not value.isascii() or not value.isprintable():
        raise ValueError(f"label value {value!r} needs Go's full quoting rules")
    return json.dumps(value)


def label_matchers(namespace: str, pods: Sequence[str]) -> str:
    """``<<.LabelMatchers>>`` for a Pods metric over ``pods`` in ``namespace``."""
    if not pods:
        raise ValueError("the adapter always asks for at least one pod")
    pod = f"pod={_quote(pods[0])}" if len(pods) == 1 else f"pod=~{_quote('|'.join(pods))}"
    return f"namespace={_quote(namespace)},{pod}"


def render_metrics_query(template: str, series: str, namespace: str, pods: Sequence[str]) -> str:
    """The PromQL the adapter sends to Prometheus for ``pods`` (see the module docstring).

    Only the three fields above are supported: a template using anything else (``range``,
    ``.LabelValuesByName``) raises, rather than being rendered differently from the adapter.
    """
    values = {".Series": series, ".LabelMatchers": label_matchers(namespace, pods),
              ".GroupBy": "pod"}

    def substitute(action: re.Match[str]) -> str:
        name = action.group(1)
        if name not in _TEMPLATE_FIELDS:
            raise ValueError(f"template action <<{name}>> is not rendered by this helper")
        return values[name]

    return _TEMPLATE_ACTION.sub(substitute, template)


def matched_names(rule: Document, names: Iterable[str]) -> list[str]:
    """The series names the rule's ``name.matches`` keeps (RE2 and ``re`` agree on it here)."""
    pattern = re.compile(rule["name"]["matches"])
    return [name for name in names if pattern.search(name)]


HPA_TOLERANCE = 0.1
"""The HPA's default tolerance (kube-controller-manager --horizontal-pod-autoscaler-tolerance)."""


def hpa_desired_replicas(current: int, usage_ratio: float,
                         tolerance: float = HPA_TOLERANCE) -> int:
    """The HPA's replica count for one metric: ``ceil(ratio * current)`` outside the tolerance.

    ``usage_ratio`` is the per-pod average over the target for a Pods metric (prometheus-adapter),
    and, for KEDA's AverageValue external metric, the query's total over ``threshold * current``:
    the algorithm of the Kubernetes documentation, without the min/max bounds and the
    stabilisation window.
    """
    if abs(usage_ratio - 1.0) <= tolerance:
        return current
    return math.ceil(usage_ratio * current)
