"""QuotaRecorder: windows under a fake clock, the ring, status, route and admission."""

from __future__ import annotations

import math

import pytest

from llm_guard_sdk import CloseReason
from llm_guard_sdk.quota import Observation, QuotaRecorder, QuotaSettings, observe_context
from llm_guard_sdk.quota.window import SKIP_NO_CONTEXT
from tests.support import FakeSource, make_guard
from tests.support.quota import LIMIT, recorder_guard, synthetic

pytestmark = pytest.mark.anyio

async def test_a_window_records_rate_context_and_peaks() -> None:
    guard, source, clock, recorder = recorder_guard()
    assert guard.extension("quota") is recorder
    sessions = [guard.registry.open("http", "/chat") for _ in range(3)]
    sessions[0].attached_bytes = 700
    assert recorder.observe_request(100) and recorder.observe_request(300)
    source.used = 500
    clock.now += 2
    await guard.tick()
    sessions[1].attached_bytes = 900  # the held peak is the sum at one sample: 700 + 900
    source.used = 200
    clock.now += 3
    await guard.tick()
    assert recorder.observations == ()  # the window is not over yet
    clock.now += 5
    await guard.tick()
    (obs,) = recorder.observations
    assert obs.qps == pytest.approx(3 / 10)
    assert obs.context_tokens == 200
    assert obs.peak_process_bytes == 500
    assert obs.peak_held_bytes == 1600
    assert (obs.sessions_opened, obs.requests, obs.peak_sessions) == (3, 2, 3)
    assert obs.window_seconds == pytest.approx(10)
    assert obs.sessions_closed == 0 and obs.mean_session_seconds is None


async def test_closed_sessions_give_the_mean_duration() -> None:
    guard, _, clock, recorder = recorder_guard()
    session = guard.registry.open("http")
    session.created_at -= 4.0  # opened four seconds ago on the session's own clock
    await guard.close_session(session, CloseReason.COMPLETED)
    recorder.observe_request(50)
    clock.now += 10
    await guard.tick()
    (obs,) = recorder.observations
    assert obs.sessions_closed == 1
    assert obs.mean_session_seconds == pytest.approx(4.0, abs=1.0)
    assert recorder.session_seconds() == obs.mean_session_seconds


async def test_a_window_without_context_is_skipped_and_counted() -> None:
    guard, _, clock, recorder = recorder_guard()
    guard.registry.open("http")
    clock.now += 10
    await guard.tick()
    assert recorder.observations == ()
    assert recorder.windows_skipped == {SKIP_NO_CONTEXT: 1}
    assert recorder.status_section()["windows_skipped"] == {SKIP_NO_CONTEXT: 1}


async def test_the_ring_keeps_the_newest_observations() -> None:
    guard, _, clock, recorder = recorder_guard(ring_size=3)
    for tokens in range(1, 6):
        recorder.observe_request(tokens * 100)
        clock.now += 10
        await guard.tick()
    assert [o.context_tokens for o in recorder.observations] == [300, 400, 500]
    assert recorder.windows_total == 5


async def test_bad_reports_are_ignored_and_counted_never_raised() -> None:
    _, _, _, recorder = recorder_guard()
    for bad in (-1, math.nan, math.inf, "12", True, None):
        assert recorder.observe_request(bad) is False  # type: ignore[arg-type]
    assert recorder.invalid_reports_total == 6
    assert observe_context(10) is False  # no guarded request is being served here
    assert QuotaRecorder(QuotaSettings()).observe_request(10) is False  # not set up


async def test_status_section_and_route_report_the_fit() -> None:
    guard, _, _, recorder = recorder_guard()
    doc = guard.status()["quota"]
    assert doc["fit"] is None and "0 observation(s)" in doc["fit_error"]
    for obs in synthetic(noise=0.0):
        recorder.add_observation(obs)
    doc = guard.status()["quota"]
    assert doc["observations"] == 25 and doc["fit_error"] is None
    assert doc["fit"]["alpha"] == pytest.approx(50.0)
    result = guard.control_routes["/quota"]({})
    assert isinstance(result, tuple)  # served synchronously
    status, body = result
    assert status == 200
    assert len(body["observations"]) == 25
    assert body["fit"]["n"] == 25
    assert body["limit_bytes"] == LIMIT and body["evict_at"] == guard.config.evict_at


async def test_admission_refuses_what_the_model_says_would_pass_evict() -> None:
    guard, source, clock, recorder = recorder_guard(admission=True, session_seconds=1.0)
    # M = 10·QPS·L + 1000: one session of L=50 over D=1 s adds 10·50/1 = 500 bytes.
    for qps in (1.0, 2.0, 3.0):
        for tokens in (10.0, 50.0, 90.0):
            recorder.add_observation(Observation(qps, tokens, int(10 * qps * tokens + 1000)))
    recorder.observe_request(50)
    source.used = 7000  # budget 0.85 · 10000 = 8500: room for three sessions of 500
    clock.now += 1
    await guard.tick()
    assert [guard.admit() for _ in range(4)] == [None, None, None, "quota"]
    assert recorder.admission.refused_total == 1
    source.used = 1000  # the next sample sees the memory freed
    clock.now += 1
    await guard.tick()
    assert guard.admit() is None
    assert guard.status()["quota"]["admission"]["enabled"] is True


async def test_admission_admits_without_a_fit() -> None:
    guard, source, clock, recorder = recorder_guard(admission=True, session_seconds=1.0)
    source.used = 9000
    recorder.observe_request(50)
    clock.now += 1
    await guard.tick()
    assert guard.admit() != "quota"
    assert recorder.admission.headroom is None


async def test_one_recorder_serves_one_guard() -> None:
    _, _, _, recorder = recorder_guard()
    other = make_guard(FakeSource())
    with pytest.raises(ValueError, match="one guard"):
        other.add_extension(recorder)


async def test_enabled_by_import_string_reads_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_GUARD_QUOTA_WINDOW", "2.5")
    guard = make_guard(FakeSource())
    recorder = guard.add_extension("llm_guard_sdk.quota:QuotaRecorder")
    assert isinstance(recorder, QuotaRecorder)
    assert recorder.settings.window == 2.5
