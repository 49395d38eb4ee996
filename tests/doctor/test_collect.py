"""Facts from a real guard's status document (in process), the rates, and the runtime section."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llm_guard_sdk import cli
from llm_guard_sdk.doctor import collect_pid, evaluate, facts_from_status
from llm_guard_sdk.doctor.from_url import rates
from llm_guard_sdk.runtime import runtime_section
from llm_guard_sdk.session import SessionState
from tests.support import FakeSource, make_guard
from tests.support.cgroup import make_tree

pytestmark = pytest.mark.anyio


def status_doc(evicted: int, shed: int, uptime: float, pid: int | None = 7) -> dict[str, Any]:
    doc: dict[str, Any] = {"sessions": {"evicted_total": evicted, "shed_total": shed},
                           "uptime_seconds": uptime}
    if pid is not None:
        doc["worker"] = {"pid": pid}
    return doc


def test_rates_from_two_samples_of_the_same_worker() -> None:
    evictions, sheds, basis = rates(status_doc(10, 4, 100.0), status_doc(12, 10, 102.0))
    assert evictions == pytest.approx(1.0) and sheds == pytest.approx(3.0)
    assert basis.startswith("measured over 2.00 s")


def test_rates_fall_back_to_lifetime_averages() -> None:
    evictions, sheds, basis = rates(status_doc(10, 20, 100.0), None)
    assert evictions == pytest.approx(0.1) and sheds == pytest.approx(0.2)
    assert basis.startswith("lifetime average")
    # Two workers answered: the second sample's own averages, and the report says why.
    evictions, _, basis = rates(status_doc(10, 0, 100.0, pid=1), status_doc(50, 0, 10.0, pid=2))
    assert evictions == pytest.approx(5.0) and "different workers" in basis


async def test_runtime_section_counts_tasks_and_held_bytes_by_state() -> None:
    guard = make_guard()
    active = guard.registry.open("http")
    idle = guard.registry.open("websocket")  # idle until a stream opens on it
    idle.attach([b"x" * 4096])
    for session in guard.sizer.measure(guard.registry.sessions_with_attachments()):
        guard.registry.resize(session)
    release = asyncio.Event()
    waiters = [asyncio.create_task(release.wait()) for _ in range(5)]
    await asyncio.sleep(0)
    section = guard.status()["runtime"]
    assert section["asyncio_tasks"] >= 6  # this test's task and its five waiters
    assert section["threads"] >= 1 and section["open_fds"] > 0
    by_state = section["sessions_by_state"]
    assert by_state["active"]["sessions"] == 1 and by_state["idle"]["sessions"] == 1
    assert by_state["idle"]["held_bytes"] >= 4096 and by_state["active"]["held_bytes"] == 0
    assert idle.state is SessionState.IDLE and active.state is SessionState.ACTIVE
    release.set()
    await asyncio.gather(*waiters)
    assert guard.status()["runtime"]["asyncio_tasks"] == section["asyncio_tasks"] - 5


def test_runtime_section_outside_a_loop_and_uncollectable_objects() -> None:
    before = runtime_section([])["gc"]["garbage"]
    gc.garbage.append(object())
    try:
        section = runtime_section([])
        assert section["asyncio_tasks"] is None
        assert section["gc"]["garbage"] == before + 1
        assert len(section["gc"]["counts"]) == len(section["gc"]["collections"]) == 3
    finally:
        gc.garbage.pop()


def test_facts_from_a_guards_status() -> None:
    source = FakeSource(used=800, limit=1000)
    guard = make_guard(source)
    guard.sample_now()
    doc = guard.status()
    facts = facts_from_status(doc, {"max_sessions": 50, "idle_timeout": 60.0},
                              target="test", rates_=(0.0, 0.0, "measured"))
    assert facts.level == "warn" and facts.deciding_source == "fake"
    assert facts.max_sessions == 50 and facts.idle_timeout == 60.0
    assert facts.rss_bytes is None and "no process source" in facts.absent["rss"]
    assert facts.open_fds is not None and facts.gc is not None
    found = {i.name: i for i in evaluate(facts)}
    assert found["level"].verdict == "warn"
    assert found["rss"].value is None and found["rss"].note
    assert found["leak_suspects"].value is None  # leak tools off


def test_an_older_status_without_runtime_still_gives_every_indicator() -> None:
    doc = make_guard().status()
    del doc["runtime"]
    facts = facts_from_status(doc, {}, target="test", rates_=(None, None, ""))
    found = {i.name: i for i in evaluate(facts)}
    assert found["open_fds"].value is None and "runtime" in found["open_fds"].note
    assert found["sessions"].value == 0  # from the sessions section


def fake_proc(tmp_path: Path, membership: str) -> str:
    """A /proc whose entry for this process names ``membership`` as its cgroup."""
    entry = tmp_path / "proc" / str(os.getpid())
    entry.mkdir(parents=True)
    (entry / "cgroup").write_text(membership)
    return str(tmp_path / "proc")


@pytest.mark.parametrize(("membership", "files", "verdict"), [
    ("0::/app\n", {"cgroup.controllers": "memory\n", "app/memory.current": "800000000",
                   "app/memory.max": "1000000000", "app/memory.stat": "inactive_file 0\n"},
     "warn"),
    ("5:memory:/app\n", {"memory/app/memory.usage_in_bytes": "990000000",
                         "memory/app/memory.limit_in_bytes": "1000000000",
                         "memory/app/memory.stat": "total_inactive_file 40000000\n"},
     "crit"),
], ids=["v2", "v1"])
def test_pid_mode_reads_the_processs_cgroup(tmp_path: Path, membership: str,
                                            files: dict[str, str], verdict: str) -> None:
    root, _ = make_tree(tmp_path, None, files)
    facts = collect_pid(os.getpid(), cgroup_root=root, proc_root=fake_proc(tmp_path, membership))
    assert facts.cgroup_limit_bytes == 1_000_000_000
    assert facts.cgroup_used_bytes in (800_000_000, 950_000_000)  # v1: minus inactive files
    assert facts.limit_source in {"cgroup", "configured"}  # unless this shell configures less
    found = {i.name: i for i in evaluate(facts)}
    assert found["cgroup_usage"].verdict == verdict
    assert "resources.limits.memory from 953.7 MiB" in found["cgroup_usage"].fix
    assert isinstance(found["rss"].value, int) and found["rss"].value > 0
    assert found["sessions"].value is None and "--url" in found["sessions"].note


def test_pid_mode_without_a_cgroup(tmp_path: Path) -> None:
    root, _ = make_tree(tmp_path, None, {})
    facts = collect_pid(os.getpid(), cgroup_root=root, proc_root=fake_proc(tmp_path, "0::/\n"))
    found = {i.name: i for i in evaluate(facts)}
    assert found["cgroup_usage"].value is None
    assert found["cgroup_usage"].note == "no readable memory cgroup for this process"


def test_a_malformed_figure_is_a_note_not_a_crash() -> None:
    facts = facts_from_status(make_guard().status(), {}, target="test",
                              rates_=(0.0, 0.0, "measured"))
    facts.vllm = {"kv_cache_usage": "lots", "waiting": 3}
    found = {i.name: i for i in evaluate(facts)}
    assert found["vllm_kv"].value is None and "could not judge" in found["vllm_kv"].note
    assert found["vllm_queue"].value == 3  # the others are still judged


class JSONServer:
    """A tiny HTTP server on loopback answering every GET with ``body`` (not a guard)."""

    def __init__(self, body: object) -> None:
        payload = json.dumps(body).encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.mark.parametrize("body", [
    {"hello": "world"},  # JSON, but not a status document
    [1, 2, 3],
    # Looks like one, with figures of the wrong type.
    {"level": "normal", "memory": {}, "sessions": {"evicted_total": "many"}},
], ids=["other-json", "list", "wrong-types"])
def test_an_answer_that_is_not_a_guards_is_one_line(body: object,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with JSONServer(body) as url:
        code = cli.main(["doctor", "--url", url, "--interval", "0", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "not a guard's status document" in err
