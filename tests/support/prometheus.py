"""A real Prometheus server on 127.0.0.1, for tests that evaluate PromQL against scraped apps.

The Debian ``prometheus`` binary (2.42) runs with a generated ``prometheus.yml`` (scrape every
second, the guard's bearer token read from a file, like a Secret mounted into a Prometheus pod)
and a temporary TSDB directory; :func:`require_prometheus` skips a test with the reason when the
binary is missing (``make system-deps`` installs it). Scrape jobs are plain dicts in Prometheus's
own configuration format, so a test can pass a job taken from a manifest (its relabelling
included) after swapping its service discovery for ``static_configs``.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.server import LOG_DIR, free_port, stop_process_tree

PROMETHEUS_EXECUTABLE = "prometheus"
"""The executable looked up on PATH (the Debian package installs /usr/bin/prometheus)."""

Vector = list[dict[str, Any]]
"""An instant-query result: ``[{"metric": {label: value}, "value": [time, "text"]}, ...]``."""


def prometheus_binary() -> str | None:
    """Path of the ``prometheus`` executable, or None when it is not installed."""
    return shutil.which(PROMETHEUS_EXECUTABLE)


def require_prometheus() -> str:
    """The executable's path; skip the calling test (with the fix) when it is missing."""
    binary = prometheus_binary()
    if binary is None:
        pytest.skip("the prometheus server is not installed: `make system-deps` (Debian package "
                    "prometheus) or put a prometheus binary on PATH")
    return binary


def bearer_job(name: str, targets: Sequence[str], token_file: Path, *,
               metrics_path: str = "/llm-guard/metrics",
               labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A scrape job for ``targets`` (``host:port``) with a bearer token read from ``token_file``."""
    return {
        "job_name": name,
        "metrics_path": metrics_path,
        "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
        "static_configs": [{"targets": list(targets), "labels": dict(labels or {})}],
    }


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered a query with an error; carries its log tail."""


class PrometheusServer:
    """One Prometheus process scraping ``jobs`` every ``scrape_interval``.

    ``workdir`` holds the configuration, the TSDB and nothing else (a test's ``tmp_path``); the
    log goes to ``.cache/prometheus-<port>.log`` and its tail is in every start error. Each job
    gets ``scrape_interval`` and ``scrape_timeout`` (equal: a slow scrape on the loaded test
    machine is late, not an error) unless it sets its own.
    """

    def __init__(self, binary: str, jobs: Sequence[Mapping[str, Any]], workdir: Path, *,
                 scrape_interval: str = "1s") -> None:
        self.binary = binary
        self.jobs = [{"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                      **job} for job in jobs]
        self.workdir = workdir
        self.scrape_interval = scrape_interval
        self.port = 0
        self.log_path = LOG_DIR / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(timeout=10.0, trust_env=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        """The generated ``prometheus.yml`` as a document."""
        return {"global": {"scrape_interval": self.scrape_interval,
                           "evaluation_interval": self.scrape_interval},
                "scrape_configs": self.jobs}

    def start(self, timeout: float = 60.0, *, attempts: int = 3) -> None:
        """Write the config, spawn, wait for ``/-/ready``; retry on a port taken meanwhile."""
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        for attempt in range(attempts):
            self._spawn(config_path)
            try:
                self._wait_ready(timeout)
                return
            except PrometheusError as exc:
                self.stop()
                if attempt + 1 == attempts or "address already in use" not in str(exc):
                    raise

    def _spawn(self, config_path: Path) -> None:
        self.port = free_port()
        storage = self.workdir / f"tsdb-{self.port}"
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"prometheus-{self.port}.log"
        with self.log_path.open("wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={config_path}",
                 f"--storage.tsdb.path={storage}",
                 f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=1h", "--log.level=warn"],
                cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _wait_ready(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}; log:\n"
                                      f"{self.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                if self.client.get(f"{self.url}/-/ready").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise PrometheusError(f"prometheus not ready in {timeout}s; log:\n"
                                      f"{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def _api(self, path: str, params: Mapping[str, Any]) -> Any:
        response = self.client.get(f"{self.url}/api/v1/{path}", params=params)
        body = response.json()
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {dict(params)} failed: {body.get('errorType')}: "
                                  f"{body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> Vector:
        """Evaluate ``expr`` (an instant query, now or at ``at``); it must return a vector."""
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._api("query", params)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr!r} returned a {data['resultType']}, not a vector")
        result: Vector = data["result"]
        return result

    def series(self, match: str) -> list[dict[str, str]]:
        """Label sets of the series ``match`` selects (what the adapter's discovery reads)."""
        result: list[dict[str, str]] = self._api("series", {"match[]": match})
        return result

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets, with ``health``, ``lastError`` and their final labels."""
        active: list[dict[str, Any]] = self._api("targets", {"state": "active"})["activeTargets"]
        return active

    def wait_for(self, expr: str, predicate: Callable[[Vector], bool], timeout: float = 60.0,
                 interval: float = 0.5) -> Vector:
        """Poll ``expr`` until ``predicate(result)``; return that result.

        Waits on a state, never a speed: a few scrapes must land first, and the test machine is
        shared. The error shows the last result and the scrape targets' health.
        """
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if predicate(result):
                return result
            if time.monotonic() > deadline:
                health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in self.targets()]
                raise AssertionError(f"{expr!r} never satisfied the condition within {timeout}s; "
                                     f"last result {result}; targets {health}")
            time.sleep(interval)

    def wait_targets_up(self, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until ``count`` targets are up (scraped with the token); return them."""
        deadline = time.monotonic() + timeout
        while True:
            targets = self.targets()
            if sum(t["health"] == "up" for t in targets) >= count:
                return targets
            if time.monotonic() > deadline:
                health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
                raise AssertionError(f"{count} targets not up within {timeout}s: {health}")
            time.sleep(0.5)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (Prometheus flushes its head block), kill after ``timeout``."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_tree(proc, timeout)

    def close(self) -> None:
        self.stop()
        self.client.close()


@contextmanager
def prometheus_server(jobs: Sequence[Mapping[str, Any]], workdir: Path, *,
                      scrape_interval: str = "1s", timeout: float = 60.0
                      ) -> Iterator[PrometheusServer]:
    """Run Prometheus scraping ``jobs`` (skips the test when it is not installed)."""
    server = PrometheusServer(require_prometheus(), jobs, workdir,
                              scrape_interval=scrape_interval)
    try:
        server.start(timeout)
        yield server
    finally:
        server.close()


def sample_value(sample: Mapping[str, Any]) -> float:
    """The float value of one vector element (Prometheus sends it as text)."""
    return float(sample["value"][1])
