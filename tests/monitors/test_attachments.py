"""Attachment sizing under a CPU budget that holds within one object (issue 9, A3)."""

from __future__ import annotations

import gc
import itertools
import weakref

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig
from llm_guard_sdk.monitors.attachments import AttachmentSizer
from llm_guard_sdk.monitors.deep_size import SizeWalk

pytestmark = pytest.mark.anyio


def step_clock() -> itertools.count[int]:
    """A fake clock that advances by one on every read: the budget is a number of objects."""
    return itertools.count()


def history(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"message {i} " + "x" * (i % 300)} for i in range(n)]


async def test_tick_measures_attached_objects_and_rebuckets() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("websocket")
    messages = session.attach([])
    messages.extend(f"{i:04d}" * 250 for i in range(200))  # ~200 KB of distinct strings
    for _ in range(100):  # a few ticks at most; each stops at the 2 ms budget
        await guard.tick()
        if session.attached_bytes:
            break
    assert session.attached_bytes >= 200 * 1000
    assert session.attached_estimated is False  # 200 items: measured, not sampled
    assert guard.registry.sessions_with_attachments() == [session]
    await guard.close_session(session, CloseReason.EVICTED)
    assert guard.registry.sessions_with_attachments() == []
    assert session.attachments == ()


def test_one_50k_message_attachment_is_sized_in_slices_within_the_budget() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("websocket")
    session.attach(history(50_000))
    budget = 25
    sizer = AttachmentSizer(budget, clock=step_clock().__next__)
    calls = 0
    while not session.attached_bytes:
        before = sizer.steps_total
        sizer.measure([session])
        calls += 1
        assert sizer.steps_total - before <= budget  # never more than the budget per tick
        assert calls < 10_000
    assert calls > 10  # really spread over many ticks, resuming where it stopped
    assert session.attached_estimated is True  # 50,000 items: estimated from a sample
    exact = SizeWalk(session.attachments, sample=10**9).finish()
    assert abs(session.attached_bytes - exact) < 0.1 * exact
    doc = guard.status(include_sessions=True)
    assert doc["session_list"][0]["estimated"] is True
    assert doc["held"]["estimated_sessions"] == 1
    assert doc["held"]["attached_bytes"] == session.attached_bytes


def test_sessions_take_turns_and_resume_their_own_walk() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    sessions = [guard.registry.open("http") for _ in range(5)]
    for i, s in enumerate(sessions):
        s.attach(["a" * 100 * (i + 1), ["b" * 10] * 3])
    sizer = AttachmentSizer(0, clock=step_clock().__next__)  # one object per call
    for _ in range(200):
        sizer.measure(sessions)
    for s in sessions:  # everyone got turns; sizes are exact (nothing sampled)
        assert s.attached_bytes == SizeWalk(s.attachments).finish()
        assert s.attached_estimated is False
    assert sessions[4].attached_bytes > sessions[0].attached_bytes


def test_last_size_is_kept_until_the_next_measurement_completes() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("http")
    data = session.attach(list(range(100)))
    sizer = AttachmentSizer(10**9, clock=step_clock().__next__)
    sizer.measure([session])
    first = session.attached_bytes
    data.extend(range(100, 400))
    slow = AttachmentSizer(5, clock=step_clock().__next__)
    slow.measure([session])
    assert session.attached_bytes == first  # half-way: the old size stands
    while session.attached_bytes == first:
        slow.measure([session])
    assert session.attached_bytes > first


def test_detaching_everything_zeroes_the_size() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("http")
    obj = session.attach(["x" * 1000])
    sizer = AttachmentSizer(10**9, clock=step_clock().__next__)
    assert sizer.measure([session]) == [session] and session.attached_bytes > 1000
    session.detach(obj)
    assert sizer.measure([session]) == [session]
    assert session.attached_bytes == 0


class Blob:
    def __init__(self) -> None:
        self.parts = [bytes(100) for _ in range(50)]


async def test_closing_a_session_mid_measurement_frees_its_attachments() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    guard.sizer.clock = step_clock().__next__
    guard.sizer.budget = 3
    session = guard.registry.open("http")
    blob = session.attach(Blob())
    ref = weakref.ref(blob)
    guard.sizer.measure(guard.registry.sessions_with_attachments())
    assert not session.attached_bytes  # unfinished: the walk holds the blob
    del blob
    await guard.close_session(session, CloseReason.COMPLETED)
    gc.collect()
    assert ref() is None
