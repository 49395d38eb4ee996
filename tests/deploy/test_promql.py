"""The autoscalers' PromQL, taken from the manifests, evaluated by a real Prometheus.

Real uvicorn servers run the demo app (``tests.support.apps.deploy_app``: the example app plus
one memory source at a pressure the test chooses), real streaming clients keep sessions open,
and a real Prometheus scrapes ``/llm-guard/metrics`` every second with the bearer token, through
the scrape job of ``deploy/kubernetes/monitoring/scrape-config.yaml`` itself: only its
Kubernetes service discovery is replaced by static targets carrying the discovery labels a pod
would have (namespace, pod name, annotations, port name), so the job's own relabelling makes the
``namespace`` and ``pod`` labels. The prometheus-adapter ``metricsQuery`` is rendered as the
adapter renders it; the KEDA query is used verbatim.

Expected values are exact: the chosen source's pressure (per mille of a 1000-byte limit) is the
pod's worst, since the real process source is measured against 8 GiB (RSS of a few hundred MiB
at most: a pressure under 0.1, below every chosen value). Every wait is on a state (targets up,
a series with the value) with a generous timeout, never on speed.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.kubernetes import (
    MANIFESTS,
    adapter_rule,
    annotation_label,
    find,
    hpa_desired_replicas,
    keda_trigger,
    matched_names,
    quantity,
    render_metrics_query,
    scrape_job,
)
from tests.support.prometheus import (
    PrometheusServer,
    Vector,
    prometheus_server,
    require_prometheus,
    sample_value,
)
from tests.support.server import UvicornServer
from tests.support.streaming_load import StreamingLoad

pytestmark = pytest.mark.e2e

METRIC = "llm_guard_memory_pressure_ratio"
TOKEN = "deploy-test-token-4d1f"
NAMESPACE = "llm-guard"
POD_PREFIX = "llm-guard-demo-6b8f9c7d4-"
STREAMS_PER_POD = 4
EXACT = 1e-9  # the values are ratios of small integers: only float formatting may differ


def _deployment() -> dict[str, Any]:
    return find(MANIFESTS / "base" / "deployment.yaml", "Deployment")


def _hpa_target() -> float:
    hpa = find(MANIFESTS / "hpa.yaml", "HorizontalPodAutoscaler")
    return float(quantity(hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]))


def _worker_pids(tickets: Path, values: tuple[float, ...], timeout: float = 90.0
                 ) -> dict[int, float]:
    """Which worker took which value: the pids written in the tickets (waits for all)."""
    deadline = time.monotonic() + timeout
    while True:
        texts = [(tickets / str(i)).read_text() if (tickets / str(i)).exists() else ""
                 for i in range(len(values))]
        if all(texts):
            return {int(text): value for text, value in zip(texts, values, strict=True)}
        if time.monotonic() > deadline:
            raise AssertionError(f"workers did not all start in {timeout}s: tickets {texts}")
        time.sleep(0.1)


def _app_env(permille: str, **extra: str) -> dict[str, str]:
    return {
        "LLM_GUARD_DEMO_BACKEND": "simulated",
        "LLM_GUARD_DEMO_RATE": "20",
        "LLM_GUARD_STATUS_TOKEN": TOKEN,
        "LLM_GUARD_SOURCES": "process",
        "LLM_GUARD_MEMORY_LIMIT": "8Gi",
        "LLM_GUARD_EXEMPT_PATHS": "/health*,/ready*,/livez,/metrics,/test",
        "LLM_GUARD_METRICS": "1",
        "DEPLOY_TEST_PERMILLE": permille,
        **extra,
    }


@contextlib.contextmanager
def _app(permille: str, *, workers: int = 1, **extra: str) -> Iterator[UvicornServer]:
    args = ("--workers", str(workers)) if workers > 1 else ()
    server = UvicornServer("tests.support.apps.deploy_app:app", name="deploy-app",
                           env={**os.environ, **_app_env(permille, **extra)}, args=args,
                           ready_path="/llm-guard/live")
    try:
        server.start(timeout=120)
        yield server
    finally:
        server.stop(timeout=30)


def _pod_job(servers: Mapping[str, UvicornServer], token_file: Path) -> dict[str, Any]:
    """The manifest's scrape job, discovering ``servers`` as pods of the Deployment.

    Each server is also discovered a second time as a pod without the scrape annotation, and on
    a port of another name: the job's relabelling must drop both.
    """
    job = scrape_job()
    annotations = _deployment()["spec"]["template"]["metadata"]["annotations"]
    meta = {annotation_label(name): value for name, value in annotations.items()}
    del job["kubernetes_sd_configs"]
    job["scrape_interval"] = "1s"
    job["scrape_timeout"] = "1s"
    job["authorization"] = {**job["authorization"], "credentials_file": str(token_file)}

    def target(server: UvicornServer, pod: str, port_name: str, **extra: str) -> dict[str, Any]:
        return {"targets": [f"127.0.0.1:{server.port}"],
                "labels": {"__meta_kubernetes_namespace": NAMESPACE,
                           "__meta_kubernetes_pod_name": pod,
                           "__meta_kubernetes_pod_container_port_name": port_name, **extra}}

    job["static_configs"] = [
        *(target(server, pod, "http", **meta) for pod, server in servers.items()),
        *(target(server, "not-annotated-" + pod, "http") for pod, server in servers.items()),
        *(target(server, "other-port-" + pod, "debug", **meta)
          for pod, server in servers.items()),
    ]
    return job


def _by_pod(result: Vector) -> dict[str, float]:
    return {sample["metric"]["pod"]: sample_value(sample) for sample in result}


def _adapter_query(pods: list[str]) -> str:
    rule = adapter_rule(METRIC)
    return render_metrics_query(rule["metricsQuery"], METRIC, NAMESPACE, pods)


def _status(server: UvicornServer) -> dict[str, Any]:
    response = httpx.get(f"{server.url}/llm-guard/status", trust_env=False, timeout=10,
                         headers={"authorization": f"Bearer {TOKEN}"})
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


def _wait_values(prometheus: PrometheusServer, query: str, expected: Mapping[str, float],
                 key: str = "pod") -> Vector:
    """Wait until ``query`` returns exactly ``expected`` (label ``key`` → value)."""

    def matches(result: Vector) -> bool:
        got = {sample["metric"].get(key, ""): sample_value(sample) for sample in result}
        return got.keys() == expected.keys() and all(
            math.isclose(got[k], v, abs_tol=EXACT) for k, v in expected.items())

    return prometheus.wait_for(query, matches, timeout=90)


def test_single_worker_pods(tmp_path: Path) -> None:
    """Two single-worker pods: adapter and KEDA queries, and both autoscalers' decision."""
    require_prometheus()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    pod_a, pod_b = POD_PREFIX + "a1b2c", POD_PREFIX + "d3e4f"
    with _app("550") as server_a, _app("300") as server_b:
        servers = {pod_a: server_a, pod_b: server_b}
        job = _pod_job(servers, token_file)
        with prometheus_server([job], tmp_path) as prometheus, \
                StreamingLoad(servers, STREAMS_PER_POD) as load:
            targets = prometheus.wait_targets_up(2, timeout=90)
            assert sorted(t["labels"]["pod"] for t in targets) == [pod_a, pod_b]
            assert {t["labels"]["namespace"] for t in targets} == {NAMESPACE}
            assert {t["scrapeUrl"].split("/", 3)[3] for t in targets} == {"llm-guard/metrics"}
            load.wait_streaming(5)

            # Discovery, as the adapter does it: the seriesQuery finds both pods' series.
            rule = adapter_rule(METRIC)
            found = prometheus.series(rule["seriesQuery"])
            assert {s["pod"] for s in found} == {pod_a, pod_b}
            assert matched_names(rule, {s["__name__"] for s in found}) == [METRIC]
            assert not any("pid" in s for s in found)  # single-process mode: no pid label

            # The known limit: 8 GiB for the real process source (far below every chosen value).
            limits = prometheus.wait_for('llm_guard_memory_limit_bytes{source="process"}',
                                         lambda r: len(r) == 2, timeout=90)
            assert [sample_value(s) for s in limits] == [8 * 2**30] * 2
            process = prometheus.query(f'max({METRIC}{{source="process"}})')
            assert 0 < sample_value(process[0]) < 0.1

            adapter = _adapter_query([pod_a, pod_b])
            _wait_values(prometheus, adapter, {pod_a: 0.55, pod_b: 0.30})
            keda = keda_trigger()["metadata"]["query"]
            _wait_values(prometheus, keda, {"": 0.85})

            # The pods are streaming: Prometheus sees the open sessions.
            sessions = prometheus.wait_for(
                f'sum by (pod) (llm_guard_sessions{{namespace="{NAMESPACE}",state="active"}})',
                lambda r: len(r) == 2 and all(sample_value(s) >= STREAMS_PER_POD for s in r),
                timeout=90)
            assert {s["metric"]["pod"] for s in sessions} == {pod_a, pod_b}

            target = _hpa_target()
            threshold = float(keda_trigger()["metadata"]["threshold"])
            # 0.55 and 0.30: average 0.425 against 0.6 -> one pod would do (ceil(2 * 0.708)).
            assert hpa_desired_replicas(2, (0.55 + 0.30) / 2 / target) == 2
            assert hpa_desired_replicas(2, 0.85 / (threshold * 2)) == 2

            # Pressure rises on both pods (below evict: the guard keeps every stream).
            for server, permille, level in ((server_a, 800, "warn"), (server_b, 700, "normal")):
                answer = httpx.post(f"{server.url}/test/fixed", params={"permille": permille},
                                    trust_env=False, timeout=10).json()
                assert answer["level"] == level, answer
            values = _by_pod(_wait_values(prometheus, adapter, {pod_a: 0.8, pod_b: 0.7}))
            [total] = _wait_values(prometheus, keda, {"": 1.5})
            # Both alternatives now ask for a third pod: ceil(2 * 0.75 / 0.6) = 3.
            assert hpa_desired_replicas(2, sum(values.values()) / 2 / target) == 3
            assert hpa_desired_replicas(2, sample_value(total) / (threshold * 2)) == 3
            # The guard's own status agrees with what the HPA is served.
            doc = _status(server_a)
            assert doc["level"] == "warn"
            assert doc["memory"]["sources"]["fixed"]["pressure"] == values[pod_a]
            assert load.events[pod_a] > 0 and not load.errors


def test_two_workers_multiprocess(tmp_path: Path) -> None:
    """One pod, two uvicorn workers in multiprocess mode: per-worker series, one pod value."""
    require_prometheus()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    multiproc = tmp_path / "multiproc"
    tickets = tmp_path / "tickets"
    multiproc.mkdir()
    tickets.mkdir()
    pod = POD_PREFIX + "w0rk2"
    with _app("600,350", workers=2, PROMETHEUS_MULTIPROC_DIR=str(multiproc),
              DEPLOY_TEST_TICKETS=str(tickets)) as server:
        servers = {pod: server}
        with prometheus_server([_pod_job(servers, token_file)], tmp_path) as prometheus, \
                StreamingLoad(servers, STREAMS_PER_POD) as load:
            prometheus.wait_targets_up(1, timeout=90)
            load.wait_streaming(5)
            pids = _worker_pids(tickets, (0.6, 0.35))
            workers = _wait_values(prometheus, f'{METRIC}{{source="fixed"}}',
                                   {str(pid): value for pid, value in pids.items()}, key="pid")
            assert {s["metric"]["pod"] for s in workers} == {pod}

            # One value for the pod: the worse worker's, neither their sum nor their mean.
            _wait_values(prometheus, _adapter_query([pod]), {pod: 0.6})
            _wait_values(prometheus, keda_trigger()["metadata"]["query"], {"": 0.6})
            sessions = prometheus.wait_for(
                f'sum by (pod) (llm_guard_sessions{{namespace="{NAMESPACE}",state="active"}})',
                lambda r: len(r) == 1 and sample_value(r[0]) >= STREAMS_PER_POD, timeout=90)
            assert sessions[0]["metric"]["pod"] == pod

            # llm-guard status answers from one worker: the one that took the request.
            doc = _status(server)
            pid = doc["worker"]["pid"]
            assert doc["memory"]["sources"]["fixed"]["pressure"] == pids[pid]
            assert not load.errors
