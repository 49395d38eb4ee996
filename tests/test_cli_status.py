"""``llm-guard status`` against a real uvicorn server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support import free_port, run_cli, uvicorn_server

pytestmark = pytest.mark.e2e

TOKEN = "cli-test-token-123"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    env = {"LLM_GUARD_SOURCES": "process", "LLM_GUARD_DEMO_BACKEND": "simulated",
           "LLM_GUARD_STATUS_TOKEN": TOKEN}
    with uvicorn_server("examples.fastapi_app:app", env,
                        ready_path="/docs") as base:
        yield base


def test_status_summary_and_json(server: str) -> None:
    summary = run_cli("--url", server, "--token", TOKEN, "status")
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout.startswith("level      normal")
    assert "sessions   active 0" in summary.stdout
    raw = run_cli("--url", server, "--token", TOKEN, "status", "--json")
    assert json.loads(raw.stdout)["thresholds"]["shed"] == 0.92


def test_status_wrong_token_exits_1(server: str) -> None:
    result = run_cli("--url", server, "--token", "wrong-token-xyz", "status")
    assert result.returncode == 1
    assert "HTTP 401" in result.stderr


def test_status_unreachable_exits_2() -> None:
    result = run_cli("--url", f"http://127.0.0.1:{free_port()}", "status")
    assert result.returncode == 2
    assert result.stderr.startswith("llm-guard: ")
