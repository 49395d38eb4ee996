"""The Kubernetes manifests parse and carry what docs/deploy.md promises.

Every YAML document under ``deploy/kubernetes/`` is loaded; the fields the autoscaling and the
probes depend on are checked one by one. ``kubectl kustomize`` (when installed) builds both
variants, so the kustomizations reference files that exist and yield the expected objects.
"""

from __future__ import annotations

import shutil
import subprocess
from decimal import Decimal

import pytest
import yaml

from llm_guard_sdk.quantities import parse_size
from tests.support.kubernetes import (
    MANIFESTS,
    adapter_rule,
    containers,
    documents,
    env_of,
    find,
    keda_trigger,
    label_matchers,
    manifest_files,
    matched_names,
    quantity,
    render_metrics_query,
    scrape_job,
)

METRIC = "llm_guard_memory_pressure_ratio"
DEPLOYMENT = MANIFESTS / "base" / "deployment.yaml"


def test_every_manifest_parses() -> None:
    files = manifest_files()
    assert len(files) >= 10, files
    for path in files:
        docs = documents(path)
        assert docs, f"{path} has no document"
        for doc in docs:
            assert isinstance(doc, dict), path
            # a scrape-config snippet is Prometheus's format, every other file Kubernetes'
            assert "apiVersion" in doc or "scrape_configs" in doc, path


def test_deployment_probes_limits_and_token() -> None:
    deployment = find(DEPLOYMENT, "Deployment")
    [app] = containers(deployment)
    limit = app["resources"]["limits"]["memory"]
    assert parse_size(limit) == parse_size(app["resources"]["requests"]["memory"]) == 2**30
    port = {p["name"]: p["containerPort"] for p in app["ports"]}["http"]
    assert port == 8000 and "--port 8000" in app["args"][0]
    ready, live = app["readinessProbe"]["httpGet"], app["livenessProbe"]["httpGet"]
    assert (ready["path"], ready["port"]) == ("/llm-guard/ready", "http")
    assert (live["path"], live["port"]) == ("/llm-guard/live", "http")
    assert app["startupProbe"]["httpGet"]["path"] == "/llm-guard/live"
    env = env_of(app)
    token = env["LLM_GUARD_STATUS_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": "llm-guard-status-token", "key": "token"}
    # the guard takes its limit from the cgroup: no second number to keep in step
    assert "LLM_GUARD_MEMORY_LIMIT" not in env
    assert "examples.fastapi_app:app" in app["args"][0]


def test_deployment_multiprocess_directory_is_an_emptydir() -> None:
    deployment = find(DEPLOYMENT, "Deployment")
    [app] = containers(deployment)
    env = env_of(app)
    directory = env["PROMETHEUS_MULTIPROC_DIR"]["value"]
    assert int(env["WEB_CONCURRENCY"]["value"]) >= 2  # uvicorn's --workers default
    mounts = {m["mountPath"]: m["name"] for m in app["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    volume = volumes[mounts[directory]]
    assert "emptyDir" in volume and volume["emptyDir"].get("medium") != "Memory"
    # emptied before uvicorn starts: a restarted container keeps its emptyDir
    assert app["args"][0].startswith('rm -rf "${PROMETHEUS_MULTIPROC_DIR:?}"/* && exec uvicorn')


def test_scrape_annotations_and_service() -> None:
    deployment = find(DEPLOYMENT, "Deployment")
    template = deployment["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["llm-guard.io/scrape"] == "true"
    assert annotations["llm-guard.io/path"] == "/llm-guard/metrics"
    service = find(MANIFESTS / "base" / "service.yaml", "Service")
    assert service["spec"]["selector"] == template["metadata"]["labels"]
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_scrape_job_and_servicemonitor_send_the_token() -> None:
    job = scrape_job()
    assert job["metrics_path"] == "/llm-guard/metrics"
    assert job["authorization"]["type"] == "Bearer"
    assert job["authorization"]["credentials_file"].endswith("llm-guard-status-token/token")
    targets = {rule.get("target_label") for rule in job["relabel_configs"]}
    assert {"namespace", "pod"} <= targets  # the labels the adapter and KEDA select on
    monitor = find(MANIFESTS / "monitoring" / "servicemonitor.yaml", "ServiceMonitor")
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/llm-guard/metrics" and endpoint["port"] == "http"
    assert endpoint["authorization"]["credentials"] == {"name": "llm-guard-status-token",
                                                        "key": "token"}


def test_hpa_scales_on_the_pods_metric() -> None:
    hpa = find(MANIFESTS / "hpa.yaml", "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"]["name"] == find(DEPLOYMENT, "Deployment")["metadata"][
        "name"]
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == METRIC
    assert metric["pods"]["target"]["type"] == "AverageValue"
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300


def test_adapter_rule_exposes_the_metric() -> None:
    rule = adapter_rule(METRIC)
    assert rule["seriesQuery"].startswith(METRIC + "{")
    assert matched_names(rule, [METRIC, METRIC + "_total", "llm_guard_level"]) == [METRIC]
    overrides = rule["resources"]["overrides"]
    assert overrides == {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    query = render_metrics_query(rule["metricsQuery"], METRIC, "llm-guard", ["a-1", "b-2"])
    assert query == f'max by (pod) ({METRIC}{{namespace="llm-guard",pod=~"a-1|b-2"}})'


def test_rendering_matches_the_adapter() -> None:
    assert label_matchers("ns", ["p"]) == 'namespace="ns",pod="p"'
    assert label_matchers("ns", ["p", "q"]) == 'namespace="ns",pod=~"p|q"'
    with pytest.raises(ValueError, match="not rendered"):
        render_metrics_query("<<range .GroupBySlice>>x<<end>>", METRIC, "ns", ["p"])


def test_keda_trigger_matches_the_hpa() -> None:
    trigger = keda_trigger()
    assert trigger["metricType"] == "AverageValue"
    query = trigger["metadata"]["query"]
    assert METRIC in query and "max by (namespace, pod)" in query
    assert 'namespace="llm-guard"' in query
    hpa = find(MANIFESTS / "hpa.yaml", "HorizontalPodAutoscaler")
    average = hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]
    # the same per-pod target in both alternatives: "600m" is the quantity 0.6
    assert quantity(trigger["metadata"]["threshold"]) == quantity(average) == Decimal("0.6")
    scaled = find(MANIFESTS / "keda" / "scaledobject.yaml", "ScaledObject")
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 300
    assert scaled["spec"]["scaleTargetRef"]["name"] == "llm-guard-demo"


@pytest.mark.parametrize(("folder", "autoscaler"), [("", "HorizontalPodAutoscaler"),
                                                    ("keda", "ScaledObject")])
def test_kustomize_builds_each_variant(folder: str, autoscaler: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (its built-in kustomize builds the variants)")
    built = subprocess.run([kubectl, "kustomize", str(MANIFESTS / folder)], capture_output=True,
                           text=True, timeout=120, check=False)
    assert built.returncode == 0, built.stderr
    kinds = sorted(doc["kind"] for doc in yaml.safe_load_all(built.stdout))
    assert kinds == sorted(["Namespace", "Service", "Deployment", autoscaler])
    for doc in yaml.safe_load_all(built.stdout):
        assert doc["metadata"].get("namespace", "llm-guard") == "llm-guard"
