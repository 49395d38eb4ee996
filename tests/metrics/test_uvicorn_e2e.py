"""End to end against real uvicorn: one worker, then two workers in multiprocess mode."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import UvicornServer

pytestmark = pytest.mark.e2e
APP = "tests.metrics.apps.metrics_app:app"


def scrape(url: str) -> list[Any]:
    response = httpx.get(url + "/llm-guard/metrics", timeout=10, trust_env=False)
    assert response.status_code == 200
    return [s for f in text_string_to_metric_families(response.text) for s in f.samples]


def poll(url: str, ready: Callable[[list[Any]], bool], timeout: float = 60.0) -> list[Any]:
    """Scrape until ``ready(samples)``; the last scrape otherwise (the assert shows it)."""
    deadline = time.monotonic() + timeout
    samples = scrape(url)
    while not ready(samples) and time.monotonic() < deadline:
        time.sleep(0.2)
        samples = scrape(url)
    return samples


def total(samples: list[Any], name: str, **labels: str) -> float:
    return sum(s.value for s in samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


def stream_once(url: str, n: int = 3, gap: float = 0.01) -> int:
    """One stream on a fresh connection (so the kernel may pick either worker); its pid."""
    with httpx.Client(trust_env=False, timeout=30,
                      limits=httpx.Limits(max_keepalive_connections=0)) as client:
        response = client.get(f"{url}/stream", params={"n": n, "gap": gap},
                              headers={"connection": "close"})
    assert response.status_code == 200
    first = next(line for line in response.text.splitlines() if line.startswith("data: pid "))
    return int(first.removeprefix("data: pid "))


def test_one_worker_scrape_follows_streams() -> None:
    server = UvicornServer(APP, env={"LLM_GUARD_METRICS": "1"}, ready_path="/llm-guard/live",
                           name="metrics-one")
    server.start()
    try:
        pid = stream_once(server.url, n=10, gap=0.03)  # spans several 50 ms ticks
        samples = poll(server.url, lambda s: total(
            s, "llm_guard_streams_total", outcome="completed") >= 1 and total(
            s, "llm_guard_time_to_first_token_seconds_count") >= 1)
        assert total(samples, "llm_guard_streams_total", outcome="completed") == 1
        assert total(samples, "llm_guard_time_to_first_token_seconds_count") == 1
        assert total(samples, "llm_guard_inter_chunk_seconds_count") >= 1
        assert total(samples, "llm_guard_memory_used_bytes", source="process") > 0
        assert all("pid" not in s.labels for s in samples)  # single process: no pid label
        status = httpx.get(server.url + "/llm-guard/status", trust_env=False).json()
        assert status["worker"] == {"pid": pid}
        assert status["latency"]["first_token_p99_seconds"] is not None
    finally:
        server.stop()


def test_two_workers_share_one_view(tmp_path: Path) -> None:
    directory = tmp_path / "prom"
    directory.mkdir()
    server = UvicornServer(APP, env={"LLM_GUARD_METRICS": "1",
                                     "PROMETHEUS_MULTIPROC_DIR": str(directory)},
                           args=("--workers", "2"), ready_path="/llm-guard/live",
                           name="metrics-two")
    server.start()
    try:
        served: Counter[int] = Counter()
        for _ in range(400):  # until both workers served at least three streams
            served[stream_once(server.url)] += 1
            if len(served) == 2 and min(served.values()) >= 3:
                break
        assert len(served) == 2, f"one worker took every connection: {served}"
        pids = {str(pid) for pid in served}

        def both_seen(samples: list[Any]) -> bool:
            rss = {s.labels.get("pid") for s in samples
                   if s.name == "llm_guard_memory_used_bytes" and s.labels["source"] == "process"}
            done = total(samples, "llm_guard_streams_total", outcome="completed")
            return pids <= rss and done == sum(served.values())

        samples = poll(server.url, both_seen)
        rss = {s.labels.get("pid"): s.value for s in samples
               if s.name == "llm_guard_memory_used_bytes" and s.labels["source"] == "process"}
        assert pids <= set(rss) and all(v > 0 for v in rss.values())  # liveall: one per worker
        pressure = {s.labels.get("pid") for s in samples
                    if s.name == "llm_guard_memory_pressure_ratio"}
        assert pids <= pressure
        # Counters sum over the workers; the level is the worst worker's, one series.
        assert total(samples, "llm_guard_streams_total", outcome="completed") == \
            sum(served.values())
        assert total(samples, "llm_guard_sessions_opened_total") >= sum(served.values())
        levels = [s for s in samples if s.name == "llm_guard_level"]
        assert len(levels) == 1 and "pid" not in levels[0].labels
        assert all(s.name.startswith("llm_guard_") for s in samples)
        # A killed worker cannot mark itself dead: the worker started in its place sweeps its
        # live gauges away; its counts stay in the sums.
        victim = int(min(pids))
        os.kill(victim, signal.SIGKILL)

        def replaced(samples: list[Any]) -> bool:
            rss = {s.labels.get("pid") for s in samples
                   if s.name == "llm_guard_memory_used_bytes" and s.labels["source"] == "process"}
            return str(victim) not in rss and len(rss) == 2

        samples = poll(server.url, replaced, timeout=90)
        rss = {s.labels.get("pid") for s in samples
               if s.name == "llm_guard_memory_used_bytes" and s.labels["source"] == "process"}
        assert str(victim) not in rss and len(rss) == 2, rss
        assert total(samples, "llm_guard_streams_total", outcome="completed") == \
            sum(served.values())
        pids = rss - {None}
    finally:
        server.stop()
    # A clean stop marks both workers dead: their live gauges leave the directory.
    assert not [p.name for p in directory.iterdir()
                if p.name.startswith("gauge_live") and p.stem.split("_")[-1] in pids]
