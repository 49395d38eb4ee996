from __future__ import annotations

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig
from llm_guard_sdk.monitors.attachments import AttachmentSizer, fallback_sizeof, load_sizer

pytestmark = pytest.mark.anyio


async def test_tick_measures_attached_objects_and_rebuckets() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("websocket")
    history = session.attach([])
    history.extend(f"{i:04d}" * 250 for i in range(200))  # ~200 KB of distinct strings
    await guard.tick()
    assert session.attached_bytes >= 200 * 1000
    assert guard.registry.sessions_with_attachments() == [session]
    await guard.close_session(session, CloseReason.EVICTED)
    assert guard.registry.sessions_with_attachments() == []
    assert session.attachments == ()


def test_sizer_is_round_robin_under_budget() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    sessions = [guard.registry.open("http") for _ in range(5)]
    for s in sessions:
        s.attach(["a" * 100])
    calls: list[int] = []

    def slow_sizer(obj: object) -> int:
        calls.append(1)
        return 7

    sizer = AttachmentSizer(budget_seconds=0.0, sizer=slow_sizer)  # one session per call
    measured = [sizer.measure(sessions)[0] for _ in range(5)]
    assert {id(s) for s in measured} == {id(s) for s in sessions}  # everyone gets a turn
    assert all(s.attached_bytes == 7 for s in sessions)


def testfallback_sizeof_counts_nested_builtins() -> None:
    nested = {"k": ["x" * 10_000, {"y": b"z" * 5_000}]}
    assert fallback_sizeof(nested) >= 15_000
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert fallback_sizeof(cyclic) > 0  # terminates on cycles


def test_load_sizer_prefers_pympler() -> None:
    sizer = load_sizer()
    assert sizer(["x" * 10_000]) >= 10_000
