"""Facts from a real guard's status document (in process), the rates, and the runtime section."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from llm_guard_sdk.doctor import evaluate, facts_from_status
from llm_guard_sdk.doctor.from_url import rates
from llm_guard_sdk.runtime import runtime_section
from llm_guard_sdk.session import SessionState
from tests.support import FakeSource, make_guard

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
