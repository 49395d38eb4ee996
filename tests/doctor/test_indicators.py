"""Every indicator's verdicts just below, at and above its thresholds, and its fix's wording."""

from __future__ import annotations

import math
from typing import Any

import pytest

from llm_guard_sdk.doctor import CHECKS, Facts, evaluate, report
from llm_guard_sdk.doctor import check_load as load
from llm_guard_sdk.doctor import check_memory as memory
from llm_guard_sdk.doctor import check_runtime as runtime
from llm_guard_sdk.doctor.model import NOT_FROM_OUTSIDE, grade, worst

GiB = 2**30


def facts(**values: Any) -> Facts:
    """URL-mode facts with the defaults' thresholds and nothing else known."""
    return Facts(mode="url", target="test", **values)


def test_grade_is_inclusive_at_each_threshold() -> None:
    assert grade(0.49, 0.5, 0.8) == "ok"
    assert grade(0.5, 0.5, 0.8) == "warn"
    assert grade(0.79, 0.5, 0.8) == "warn"
    assert grade(0.8, 0.5, 0.8) == "crit"


@pytest.mark.parametrize(("ratio", "verdict"), [(0.74, "ok"), (0.75, "warn"), (0.91, "warn"),
                                                (0.92, "crit")])
def test_rss_against_the_guards_own_thresholds(ratio: float, verdict: str) -> None:
    found = memory.rss(facts(rss_bytes=math.ceil(ratio * 4 * GiB), limit_bytes=4 * GiB,
                             limit_source="cgroup", sessions_by_state={"active": 100}))
    assert found.verdict == verdict
    if verdict != "ok":
        assert "raise the memory limit (cgroup) from 4.0 GiB to" in found.fix
        assert "LLM_GUARD_MAX_SESSIONS from 10000 to" in found.fix


def test_rss_follows_configured_thresholds() -> None:
    found = memory.rss(facts(rss_bytes=int(0.6 * GiB), limit_bytes=GiB, warn_at=0.5,
                             shed_at=0.7))
    assert found.verdict == "warn" and "warn at 50 %" in found.fix


def test_rss_without_limit_or_reading() -> None:
    assert memory.rss(facts(rss_bytes=GiB)).verdict == "ok"
    absent = memory.rss(facts())
    assert absent.value is None and absent.verdict == "ok" and absent.note


def test_memory_limit_verdicts() -> None:
    assert memory.memory_limit(facts(limit_bytes=GiB, limit_source="cgroup")).verdict == "ok"
    host = memory.memory_limit(facts(limit_bytes=64 * GiB, limit_source="host"))
    assert host.verdict == "warn" and "LLM_GUARD_MEMORY_LIMIT" in host.fix
    none = memory.memory_limit(facts(limit_source=""))
    assert none.verdict == "crit" and "LLM_GUARD_MEMORY_LIMIT" in none.fix


@pytest.mark.parametrize(("ratio", "verdict"), [(0.5, "ok"), (0.75, "warn"), (0.95, "crit")])
def test_cgroup_usage(ratio: float, verdict: str) -> None:
    found = memory.cgroup_usage(facts(cgroup_used_bytes=math.ceil(ratio * 2 * GiB),
                                      cgroup_limit_bytes=2 * GiB))
    assert found.verdict == verdict
    assert "resources.limits.memory from 2.0 GiB" in found.fix
    assert memory.cgroup_usage(facts()).value is None


def test_idle_share_matches_the_issue_example() -> None:
    found = memory.idle_share(facts(held_total_bytes=100 * 2**20, held_idle_bytes=62 * 2**20))
    assert found.verdict == "warn"
    assert found.fix == ("idle sessions hold 62 % of held memory: lower LLM_GUARD_IDLE_TIMEOUT "
                         "from 300 to 120 s")


@pytest.mark.parametrize(("share", "verdict"), [(0.49, "ok"), (0.5, "warn"), (0.8, "crit")])
def test_idle_share_thresholds(share: float, verdict: str) -> None:
    total = 100 * 2**20
    idle = math.ceil(share * total)
    found = memory.idle_share(facts(held_total_bytes=total, held_idle_bytes=idle,
                                    idle_timeout=600.0))
    assert found.verdict == verdict
    if verdict == "crit":
        assert "LLM_GUARD_IDLE_TIMEOUT_LEVEL from warn to normal" in found.fix


def test_idle_share_ignores_negligible_held_memory() -> None:
    found = memory.idle_share(facts(held_total_bytes=1000, held_idle_bytes=900))
    assert found.verdict == "ok" and "only" in found.note


def test_suggested_idle_timeout_stays_in_bounds() -> None:
    assert memory.suggested_idle_timeout(300, 0.62) == 120
    assert memory.suggested_idle_timeout(300, 0.99) == 30
    assert memory.suggested_idle_timeout(20, 0.5) == 20  # never raises it


@pytest.mark.parametrize(("level", "verdict"), [("normal", "ok"), ("warn", "warn"),
                                                ("evict", "warn"), ("shed", "crit")])
def test_level(level: str, verdict: str) -> None:
    assert memory.level(facts(level=level, pressure=0.5)).verdict == verdict


@pytest.mark.parametrize(("live", "verdict"), [(7999, "ok"), (8000, "warn"), (9500, "crit")])
def test_sessions_against_max_sessions(live: int, verdict: str) -> None:
    found = load.sessions(facts(sessions_by_state={"active": live}))
    assert found.verdict == verdict
    assert "LLM_GUARD_MAX_SESSIONS from 10000 to 20000" in found.fix


@pytest.mark.parametrize("check", [load.eviction_rate, load.shed_rate])
@pytest.mark.parametrize(("rate", "verdict"), [(0.0, "ok"), (0.1, "warn"), (1.0, "crit")])
def test_rates(check: Any, rate: float, verdict: str) -> None:
    found = check(facts(eviction_rate=rate, shed_rate=rate, rate_basis="measured"))
    assert found.verdict == verdict and found.note == "measured"
    assert "LLM_GUARD_MAX_SESSIONS" in found.fix


@pytest.mark.parametrize(("usage", "verdict"), [(0.89, "ok"), (0.9, "warn"), (0.98, "crit")])
def test_vllm_kv(usage: float, verdict: str) -> None:
    found = load.vllm_kv(facts(vllm={"kv_cache_usage": usage}))
    assert found.verdict == verdict and "gpu_memory_utilization" in found.fix


@pytest.mark.parametrize(("waiting", "verdict"), [(4, "ok"), (5, "warn"), (9, "crit")])
def test_vllm_queue_with_a_cap(waiting: int, verdict: str) -> None:
    found = load.vllm_queue(facts(vllm={"waiting": waiting, "running": 8,
                                        "max_waiting_requests": 10}))
    assert found.verdict == verdict and "LLM_GUARD_MAX_WAITING_REQUESTS=10" in found.fix


def test_vllm_queue_without_a_cap_suggests_one() -> None:
    assert load.vllm_queue(facts(vllm={"waiting": 15, "running": 8})).verdict == "ok"
    found = load.vllm_queue(facts(vllm={"waiting": 16, "running": 8}))
    assert found.verdict == "warn" and "LLM_GUARD_MAX_WAITING_REQUESTS=16" in found.fix


def test_vllm_absent_is_null_with_a_note() -> None:
    for check in (load.vllm_kv, load.vllm_queue):
        found = check(facts())
        assert found.value is None and found.verdict == "ok" and "vLLM" in found.note


@pytest.mark.parametrize(("p99", "verdict"), [(1.99, "ok"), (2.0, "warn"), (10.0, "crit")])
def test_ttft_p99(p99: float, verdict: str) -> None:
    found = load.ttft_p99(facts(latency={"first_token_p99_seconds": p99, "samples": 50}))
    assert found.verdict == verdict and found.note == "50 samples"


def test_ttft_without_samples_or_section() -> None:
    assert "first chunk" in load.ttft_p99(facts(latency={"first_token_p99_seconds": None})).note
    assert "latency" in load.ttft_p99(facts()).note


@pytest.mark.parametrize(("fds", "verdict"), [(699, "ok"), (700, "warn"), (900, "crit")])
def test_open_fds_against_the_descriptor_limit(fds: int, verdict: str) -> None:
    found = runtime.open_fds(facts(open_fds=fds, max_fds=1000))
    assert found.verdict == verdict and "from 1000 to 4096" in found.fix


@pytest.mark.parametrize(("count", "verdict"), [(199, "ok"), (200, "warn"), (1000, "crit")])
def test_threads(count: int, verdict: str) -> None:
    assert runtime.threads(facts(threads=count)).verdict == verdict


def test_asyncio_tasks_against_what_sessions_explain() -> None:
    by_state = {"active": 10}  # allowance 50 + 8 * 10 = 130
    assert runtime.asyncio_tasks(facts(asyncio_tasks=130, sessions_by_state=by_state)
                                 ).verdict == "ok"
    assert runtime.asyncio_tasks(facts(asyncio_tasks=131, sessions_by_state=by_state)
                                 ).verdict == "warn"
    crit = runtime.asyncio_tasks(facts(asyncio_tasks=521, sessions_by_state=by_state))
    assert crit.verdict == "crit" and "130 expected" in crit.fix


@pytest.mark.parametrize(("stuck", "verdict"), [(0, "ok"), (1, "warn"), (1000, "crit")])
def test_gc_uncollectable(stuck: int, verdict: str) -> None:
    found = runtime.gc_uncollectable(facts(gc={"uncollectable": stuck, "garbage": 0,
                                               "counts": [1, 2, 3]}))
    assert found.verdict == verdict and found.value == stuck


def test_leak_suspects() -> None:
    assert runtime.leak_suspects(facts(leaks={"suspected_total": 0})).verdict == "ok"
    assert runtime.leak_suspects(facts(leaks={"suspected_total": 2})).verdict == "warn"
    found = runtime.leak_suspects(facts(leaks={"suspected_total": 2, "confirmed_total": 1}))
    assert found.verdict == "crit" and "/llm-guard/leaks" in found.fix
    assert "LLM_GUARD_LEAKS=1" in runtime.leak_suspects(facts()).note


def test_sources_and_internal_errors() -> None:
    assert runtime.sources(facts(stale_sources={})).verdict == "ok"
    stale = runtime.sources(facts(stale_sources={"cgroup": "permission denied"}))
    assert stale.verdict == "warn" and "cgroup (permission denied)" in stale.fix
    assert runtime.internal_errors(facts(internal_errors=0)).verdict == "ok"
    assert runtime.internal_errors(facts(internal_errors=3)).verdict == "warn"


def test_pid_mode_notes_say_to_use_the_url() -> None:
    found = evaluate(Facts(mode="pid", target="pid 1"))
    assert len(found) == len(CHECKS) >= 12
    inside = {i.name: i for i in found}["asyncio_tasks"]
    assert inside.value is None and inside.verdict == "ok" and inside.note == NOT_FROM_OUTSIDE


def test_report_exit_code_is_the_worst_verdict() -> None:
    calm = report(facts(level="normal", limit_bytes=GiB, limit_source="configured"))
    assert calm["verdict"] == "ok" and calm["exit_code"] == 0
    warned = report(facts(level="warn", limit_bytes=GiB, limit_source="configured"))
    assert warned["exit_code"] == 1
    shed = report(facts(level="shed", threads=5, limit_bytes=GiB, limit_source="configured"))
    assert shed["exit_code"] == 2
    assert worst(evaluate(facts(level="shed"))) == "crit"
    for item in calm["indicators"]:
        assert set(item) >= {"name", "value", "verdict", "fix"}
        assert item["fix"] == "" if item["verdict"] == "ok" else item["fix"]
