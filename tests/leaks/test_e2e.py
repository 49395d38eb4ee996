"""End to end under a real uvicorn: the runtime sweeper on leaky endpoints, and the CLI snapshot.

``tests/leaks/apps/leaky_app.py`` has one endpoint per leak pattern; ``LLM_GUARD_LEAKS=1``
attaches the sweeper through the config switch.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import free_port, run_cli, uvicorn_server

pytestmark = pytest.mark.e2e

TOKEN = "leaks-e2e-token"
APP = "tests.leaks.apps.leaky_app"
ENV = {
    "LLM_GUARD_LEAKS": "1",
    "LLM_GUARD_LEAK_GRACE": "0.5",
    "LLM_GUARD_SOURCES": "process",
    "LLM_GUARD_SAMPLE_INTERVAL": "0.1",
    "LLM_GUARD_STATUS_TOKEN": TOKEN,
    "LLM_GUARD_SNAPSHOT_MIN_INTERVAL": "1",  # the CLI waits out the 429s
}
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with uvicorn_server(f"{APP}:app", ENV) as base:
        yield base


def wait_for_leaks(http: httpx.Client, base: str, count: int, timeout: float = 30.0
                   ) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        doc: dict[str, Any] = http.get(f"{base}/llm-guard/leaks", headers=AUTH).json()
        if doc["confirmed_total"] >= count or time.monotonic() > deadline:
            return doc
        time.sleep(0.1)


def test_sweeper_reports_each_pattern_with_its_chain(server: str) -> None:
    with httpx.Client(timeout=30) as http:
        for _ in range(5):
            assert http.get(f"{server}/clean").text == "t0 t1 t2 "
        for path in ("/leak/cache", "/leak/closure", "/leak/stream?conn=42", "/leak/task",
                     "/leak/del-cycle"):
            assert http.get(f"{server}{path}").status_code == 200
        doc = wait_for_leaks(http, server, 5)
        time.sleep(1.5)  # several more sweeps: nothing else may turn up
        doc = http.get(f"{server}/llm-guard/leaks", headers=AUTH).json()
        status = http.get(f"{server}/llm-guard/status", headers=AUTH).json()["leaks"]
    chains = sorted((r["kind"], r["chain"]["text"]) for r in doc["recent"])
    module = f"module {APP}"
    assert chains[:3] == [
        ("attachment", f"{module} -> dict CONTEXTS -> dict['sess-…'] -> Context"),
        ("attachment", f"{module} -> list CALLBACKS -> function leak_closure.<locals>.on_done "
                       "-> closure ctx -> Context"),
        ("generator", f"{module} -> dict STREAMS -> dict['conn-…'] -> async_generator tokens"),
    ]
    assert chains[3] == ("revived", f"{module} -> list PENDING_CLOSE -> Connection -> Context ctx")
    assert chains[4][0] == "session"
    assert re.fullmatch(r"Task Task-\d+ \(pending\) -> .* -> Session", chains[4][1]), chains[4]
    assert len(chains) == 5, chains  # the clean endpoint leaked nothing
    assert doc["confirmed_total"] == 5 and doc["sessions_tracked_total"] == 10
    assert status["confirmed_total"] == 5 and status["suspected_total"] >= 4
    assert len(status["recent"]) == 5 and status["mode"] in ("full", doc["mode"])
    for report in doc["recent"]:
        assert report["size_bytes"] and report["owner"].startswith("sess-")
        if report["graph"]:
            assert Path(report["graph"]).read_bytes()[:4] == b"\x89PNG"
    assert "secret" not in json.dumps(doc)  # prompts are redacted


def test_cli_snapshot_prints_the_diff_table(server: str) -> None:
    result = run_cli("snapshot", "--url", server, "--token", TOKEN, "--interval", "0.2",
                     "--limit", "5")
    assert result.returncode == 0, result.stderr
    assert re.search(r"snapshot (\d+) taken; the next in 0.2 s", result.stderr)
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"snapshot \d+ -> \d+ after [\d.]+ s", lines[0])
    assert lines[1].startswith("rss ") and lines[2].startswith("sessions ")
    assert lines[3].startswith("objects ")
    assert lines[5].split() == ["type", "before", "after", "delta", "bytes", "delta"]
    assert "tracemalloc" in result.stdout


def test_cli_snapshot_json_and_global_options(server: str) -> None:
    result = run_cli("--url", server, "--token", TOKEN, "snapshot", "--interval", "0", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["base"] + 1 == doc["id"] and "types" in doc


def test_cli_snapshot_errors(server: str) -> None:
    wrong = run_cli("snapshot", "--url", server, "--token", "wrong-token-1", "--interval", "0")
    assert wrong.returncode == 1 and "HTTP 401" in wrong.stderr
    down = run_cli("snapshot", "--url", f"http://127.0.0.1:{free_port()}", "--interval", "0")
    assert down.returncode == 2 and down.stderr.startswith("llm-guard: ")
    bad = run_cli("snapshot", "--interval", "-1")
    assert bad.returncode == 2 and "expected seconds >= 0" in bad.stderr
