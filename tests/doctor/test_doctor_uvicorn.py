"""``llm-guard doctor`` and ``llm-guard config --url`` against a real uvicorn server.

The pressure app (tests/support/pressure_app.py) lets the test set the guard's level, so each
exit code is reached for real: 0 at normal, 1 at warn, 2 while shedding; then the failures
(dead URL, dead PID, 401, not a guard) exit 2 with one line on stderr and no traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support import UvicornServer, free_port, run_cli

pytestmark = pytest.mark.e2e

TOKEN = "doctor-token-1234"
ENV = {"LLM_GUARD_STATUS_TOKEN": TOKEN}


@pytest.fixture(scope="module")
def server() -> Iterator[UvicornServer]:
    """The pressure app behind a token, with a configured limit (so the limit is not "host")."""
    import os

    env = {**os.environ, "LLM_GUARD_STATUS_TOKEN": TOKEN, "LLM_GUARD_MEMORY_LIMIT": "4Gi",
           "LLM_GUARD_SAMPLE_INTERVAL": "0.05"}
    uvicorn = UvicornServer("tests.support.pressure_app:app", env=env, name="doctor",
                            ready_path="/")
    uvicorn.start()
    try:
        yield uvicorn
    finally:
        uvicorn.stop(timeout=10)


def set_pressure(base: str, used: int) -> str:
    level: str = httpx.post(f"{base}/test/pressure", params={"used": used}).json()["level"]
    return level


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli("doctor", "--json", *args, env=ENV if env is None else env)


def indicators(result: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    doc = json.loads(result.stdout)
    return {item["name"]: item for item in doc["indicators"]}


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_json_contract_and_exit_0_when_all_is_well(server: UvicornServer) -> None:
    assert set_pressure(server.url, 0) == "normal"
    result = doctor("--url", server.url, "--interval", "0.2")
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "ok" and doc["exit_code"] == 0
    assert len(doc["indicators"]) >= 12
    for item in doc["indicators"]:
        assert item["verdict"] in {"ok", "warn", "crit"}
        assert item["fix"] == ""  # every verdict is ok
        assert {"name", "value", "verdict", "fix"} <= set(item)
    found = {item["name"]: item for item in doc["indicators"]}
    assert found["memory_limit"]["value"] == 4 * 2**30
    assert found["memory_limit"]["detail"]["source"] == "configured"
    assert found["open_fds"]["value"] > 0 and found["threads"]["value"] >= 1
    assert found["asyncio_tasks"]["value"] >= 1  # the sampler at least
    assert found["gc_uncollectable"]["value"] == 0
    assert found["vllm_kv"]["value"] is None and "vLLM" in found["vllm_kv"]["note"]
    assert found["eviction_rate"]["note"].startswith("measured over")
    # The status's latency and worker sections (the metrics work) are read when present.
    assert server.proc is not None and doc["target"]["worker_pid"] == server.proc.pid
    assert found["ttft_p99"]["value"] is None
    assert found["ttft_p99"]["note"] == "no stream has sent a first chunk yet"


def test_exit_1_at_warn_and_2_while_shedding(server: UvicornServer) -> None:
    try:
        assert set_pressure(server.url, 800) == "warn"
        warned = doctor("--url", server.url, "--interval", "0")
        assert warned.returncode == 1, warned.stderr
        assert indicators(warned)["level"]["verdict"] == "warn"
        assert "level warn" in indicators(warned)["level"]["fix"]
        assert set_pressure(server.url, 950) == "shed"
        assert httpx.get(f"{server.url}/").status_code == 503  # one refused session
        shed = doctor("--url", server.url, "--interval", "0")
        assert shed.returncode == 2, shed.stderr
        found = indicators(shed)
        assert found["level"]["verdict"] == "crit"
        assert found["shed_rate"]["value"] > 0 and found["shed_rate"]["verdict"] != "ok"
        assert "lifetime average" in found["shed_rate"]["note"]
    finally:
        assert set_pressure(server.url, 0) == "normal"


def test_plain_text_when_not_a_terminal(server: UvicornServer) -> None:
    result = run_cli("doctor", "--url", server.url, "--token", TOKEN, "--interval", "0")
    assert result.returncode in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"llm-guard doctor: {server.url}/llm-guard/status")
    assert any(line.startswith("OK    open_fds") for line in lines)
    assert "\x1b[" not in result.stdout  # no colours, no table borders in a pipe


def test_401_says_to_pass_the_token(server: UvicornServer) -> None:
    result = doctor("--url", server.url, env={})
    assert_one_line_error(result, "HTTP 401", "--token", "LLM_GUARD_STATUS_TOKEN")


def test_dead_url_exits_2_with_one_line() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    assert_one_line_error(doctor("--url", dead, "--timeout", "5"), dead)


def test_an_answer_that_is_not_a_guards_exits_2(server: UvicornServer) -> None:
    # Under another prefix the app itself answers "ok" (plain text), not a guard.
    assert_one_line_error(doctor("--url", server.url, "--prefix", "/app"), "/app/status")


def test_dead_pid_exits_2_with_one_line() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert_one_line_error(doctor("--pid", str(child.pid)), f"no process with pid {child.pid}")


def test_pid_mode_on_the_servers_process(server: UvicornServer) -> None:
    assert server.proc is not None
    result = doctor("--pid", str(server.proc.pid))
    doc = json.loads(result.stdout)
    assert result.returncode == doc["exit_code"], result.stderr
    assert len(doc["indicators"]) >= 12
    found = {item["name"]: item for item in doc["indicators"]}
    assert found["rss"]["value"] > 2**20  # a Python server: megabytes at least
    assert found["threads"]["value"] >= 1 and found["open_fds"]["value"] > 0
    # Read from the process's own environment: LLM_GUARD_MEMORY_LIMIT=4Gi.
    assert found["memory_limit"]["value"] <= 4 * 2**30
    assert "settings: from the process's environment" in doc["notes"]
    for inside in ("asyncio_tasks", "sessions", "gc_uncollectable", "ttft_p99"):
        assert found[inside]["value"] is None and found[inside]["verdict"] == "ok"
        assert "--url" in found[inside]["note"]


def test_config_url_reports_code_environment_and_default(server: UvicornServer) -> None:
    result = run_cli("config", "--url", server.url, "--json", env=ENV)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    settings = doc["settings"]
    assert doc["where"] == "running guard"
    assert settings["exempt_paths"]["origin"] == "code"  # the app passes it (make_guard)
    assert settings["memory_limit"] == {"value": 4 * 2**30, "origin": "environment",
                                        "env": "LLM_GUARD_MEMORY_LIMIT"}
    assert settings["status_token"]["value"] == "***" and TOKEN not in result.stdout
    assert settings["warn_at"]["origin"] == "default"
    assert doc["memory_limit"]["bytes"] <= 4 * 2**30
    refused = run_cli("config", "--url", server.url, env={})
    assert refused.returncode == 1 and refused.stdout == ""  # as for status: the server said no
    assert "HTTP 401" in refused.stderr and "--token" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
