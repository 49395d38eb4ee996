"""The guard's log: start-up line, level transitions with extra fields, rate-limited sheds."""

from __future__ import annotations

import logging

import pytest

from llm_guard_sdk.events import GuardEvents
from llm_guard_sdk.session import CloseReason
from tests.support import sources
from tests.support.guard import LIMIT, NORMAL, SHED, WARN, fake_source, make_guard

pytestmark = pytest.mark.anyio


def guard_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "llm_guard_sdk"]


def test_start_up_states_the_limit_its_origin_and_the_deciding_source(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "llm_guard_sdk")
    sources.make_guard(sources.FakeSource(780, 1000), memory_limit="64Mi")
    (record,) = [r for r in guard_records(caplog) if "started" in r.getMessage()]
    assert record.levelno == logging.INFO
    message = record.getMessage()
    assert "memory limit 64Mi (from configured)" in message
    assert "sources: fake" in message and "deciding source: fake at pressure 0.78" in message
    assert record.llm_guard_limit_source == "configured"  # type: ignore[attr-defined]


def test_every_transition_is_logged_with_its_fields(caplog: pytest.LogCaptureFixture) -> None:
    source = fake_source(NORMAL)
    guard = make_guard(source)
    caplog.set_level(logging.INFO, "llm_guard_sdk")
    for used in (WARN, SHED, 860_000, NORMAL):  # 0.86: below shed's exit (0.87), evict
        source.used = used
        guard.sample_now()
    transitions = [r for r in guard_records(caplog) if "llm-guard level" in r.getMessage()]
    assert [(r.llm_guard_previous_level, r.llm_guard_level, r.levelno)  # type: ignore[attr-defined]
            for r in transitions] == [
        ("normal", "warn", logging.WARNING), ("warn", "shed", logging.WARNING),
        ("shed", "evict", logging.WARNING), ("evict", "normal", logging.INFO)]
    shed = transitions[1]
    assert shed.llm_guard_pressure == 0.95  # type: ignore[attr-defined]
    assert shed.llm_guard_source == "fake"  # type: ignore[attr-defined]
    assert (shed.llm_guard_used_bytes, shed.llm_guard_limit_bytes) == (  # type: ignore[attr-defined]
        SHED, LIMIT)
    assert "pressure 0.95 from source fake (927.73Ki of 976.56Ki)" in shed.getMessage()
    source.used = NORMAL
    guard.sample_now()  # no change, no line
    assert len([r for r in guard_records(caplog) if "llm-guard level" in r.getMessage()]) == 4


def test_sheds_are_summarised_under_load(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    guard = make_guard(fake_source(SHED))
    guard.events = GuardEvents(interval=5.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, "llm_guard_sdk")
    for i in range(200):
        guard.record_shed("memory_pressure", f"/chat/{i}")
    lines = [r.getMessage() for r in guard_records(caplog) if "shed " in r.getMessage()]
    assert lines == ["llm-guard shed a request /chat/0: memory_pressure"]
    now[0] = 6.0
    guard.events.flush()  # what the tick does
    lines = [r.getMessage() for r in guard_records(caplog) if "shed " in r.getMessage()]
    assert lines[1] == ("llm-guard shed 199 more in the last 6.0 s: memory_pressure=199 "
                        "(e.g. /chat/1, /chat/2, /chat/3)")
    assert guard.status()["actions"]["shed_by_reason"] == {"memory_pressure": 200}


async def test_evictions_are_logged_with_reason_and_session_prefix(
        caplog: pytest.LogCaptureFixture) -> None:
    guard = make_guard()
    guard.events = GuardEvents(interval=5.0, clock=lambda: 0.0)
    caplog.set_level(logging.INFO, "llm_guard_sdk")
    sessions = [guard.registry.open("websocket") for _ in range(3)]
    for session in sessions:
        await guard.close_session(session, CloseReason.EVICTED)
    await guard.close_session(guard.registry.open("http"), CloseReason.COMPLETED)  # not logged
    (line,) = [r for r in guard_records(caplog) if "evicted" in r.getMessage()]
    assert line.getMessage().startswith(f"llm-guard evicted session {sessions[0].id[:8]} "
                                        "(evicted, ")
    assert line.llm_guard_session == sessions[0].id[:8]  # type: ignore[attr-defined]
    assert guard.events.evictions.suppressed == {"evicted": 2}
