"""The degrade extension: level gating, the built-in headroom policy, hooks that misbehave."""

from __future__ import annotations

import logging

import pytest

from llm_guard_sdk.degrade import (
    DegradeDecision,
    Degrader,
    DegradeRequest,
    DegradeSettings,
    HeadroomPolicy,
    headroom,
    headroom_cap,
)
from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.policy import Level
from tests.support import FakeSource, make_guard

# Default thresholds: warn 0.75, evict 0.85, shed 0.92 (FakeSource limit 1000 bytes).


def degrading(used: int, hook: object = None, **kwargs: object) -> tuple[FakeSource, Degrader]:
    source = FakeSource(used=used)
    degrader = Degrader(hook, **kwargs)  # type: ignore[arg-type]
    guard = make_guard(source, extensions=[degrader])
    guard.sample_now()
    return source, degrader


@pytest.mark.parametrize(("pressure", "start", "expected"), [
    (0.75, 0.75, 1.0), (0.80, 0.75, 12 / 17), (0.92, 0.75, 0.0), (0.99, 0.75, 0.0),
    (0.5, 0.75, 1.0), (0.885, 0.85, 0.5), (0.46, 0.0, 0.5)])
def test_headroom_runs_from_the_degrade_threshold_to_shed(pressure: float, start: float,
                                                          expected: float) -> None:
    assert headroom(pressure, start, 0.92) == pytest.approx(expected)


@pytest.mark.parametrize(("asked", "room", "floor", "cap"), [
    (100, 1.0, 16, 100), (100, 12 / 17, 16, 71), (100, 0.0, 16, 16), (10, 0.0, 16, 10),
    (1000, 0.5, 1, 500), (3, 0.01, 1, 1)])
def test_headroom_cap_is_proportional_with_a_floor_never_above_the_ask(
        asked: int, room: float, floor: int, cap: int) -> None:
    assert headroom_cap(asked, room, floor) == cap


def test_below_the_level_nothing_is_asked_or_counted() -> None:
    calls: list[DegradeRequest] = []

    def hook(request: DegradeRequest) -> DegradeDecision:
        calls.append(request)
        return DegradeDecision(max_tokens=1)

    _, degrader = degrading(700, hook)
    request = DegradeRequest(max_tokens=100)
    assert degrader.apply(request) is request
    assert calls == [] and degrader.status() == {
        "max_tokens": 0, "model": 0, "history": 0, "hook_errors": 0, "considered": 0}


def test_builtin_policy_caps_max_tokens_by_headroom_at_warn() -> None:
    _, degrader = degrading(800)
    sent = degrader.apply(DegradeRequest(max_tokens=100, backend="vllm"))
    assert sent.max_tokens == 71  # ceil(100 * (0.92 - 0.80) / (0.92 - 0.75))
    assert sent.level is Level.WARN and sent.headroom == pytest.approx(12 / 17)
    assert degrader.apply(DegradeRequest(max_tokens=None)).max_tokens is None  # nothing to cap
    assert degrader.status()["max_tokens"] == 1 and degrader.status()["considered"] == 2


def test_the_level_can_be_evict_and_an_engine_pressure_counts() -> None:
    _, degrader = degrading(800, level="evict")
    assert degrader.apply(DegradeRequest(max_tokens=100)).max_tokens == 100  # warn < evict
    # The engine's own pressure (its KV cache) is higher than the guard's: it decides.
    sent = degrader.apply(DegradeRequest(max_tokens=100), pressure=0.885)
    assert sent.level is Level.EVICT and sent.max_tokens == 50


def test_min_tokens_setting_floors_the_cap() -> None:
    _, degrader = degrading(950, settings=DegradeSettings.defaults(min_tokens=8))
    assert degrader.apply(DegradeRequest(max_tokens=100)).max_tokens == 8
    with pytest.raises(ConfigError, match="LLM_GUARD_DEGRADE_MIN_TOKENS='0' is invalid"):
        DegradeSettings.from_env({"LLM_GUARD_DEGRADE_MIN_TOKENS": "0"})


def test_a_hook_may_switch_the_model_and_shorten_history_counted_by_kind() -> None:
    def hook(request: DegradeRequest) -> DegradeDecision:
        if request.messages is None:
            return DegradeDecision(model="small", prompt=request.prompt)
        return DegradeDecision(model="small", messages=list(request.messages)[-1:],
                               max_tokens=500)  # above the ask: ignored

    _, degrader = degrading(800, hook)
    history = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    sent = degrader.apply(DegradeRequest(max_tokens=100, messages=history, model="big"))
    assert (sent.model, sent.messages, sent.max_tokens) == ("small", history[-1:], 100)
    sent = degrader.apply(DegradeRequest(prompt="long prompt", model="small"))
    assert sent.prompt == "long prompt"  # the same model and no messages: nothing changed
    assert degrader.status() == {"max_tokens": 0, "model": 1, "history": 1, "hook_errors": 0,
                                 "considered": 2}


@pytest.mark.parametrize("answer", [
    RuntimeError("hook bug"), "cap it", DegradeDecision(max_tokens=0),
    DegradeDecision(max_tokens=True), DegradeDecision(model=""),
    DegradeDecision(messages="not a list"),  # type: ignore[arg-type]
    DegradeDecision(prompt=[1.5])])  # type: ignore[list-item]
def test_a_hook_that_raises_or_answers_nonsense_is_counted_and_the_request_goes_on(
        answer: object, caplog: pytest.LogCaptureFixture) -> None:
    def hook(request: DegradeRequest) -> object:
        if isinstance(answer, Exception):
            raise answer
        return answer

    _, degrader = degrading(800, hook)
    request = DegradeRequest(max_tokens=100, prompt="p")
    with caplog.at_level(logging.WARNING, "llm_guard_sdk"):
        assert degrader.apply(request) is request
        assert degrader.apply(request) is request
    status = degrader.status()
    assert status["hook_errors"] == 2 and status["max_tokens"] == status["history"] == 0
    assert len([r for r in caplog.records if "degrade hook failed" in r.getMessage()]) == 1


def test_of_finds_the_guards_degrader_only() -> None:
    _, degrader = degrading(0)
    assert Degrader.of(degrader.guard) is degrader
    assert Degrader.of(make_guard()) is None and Degrader.of(None) is None


def test_headroom_policy_alone() -> None:
    policy = HeadroomPolicy(min_tokens=4)
    assert policy(DegradeRequest(max_tokens=40, headroom=0.25)) == DegradeDecision(max_tokens=10)
    assert policy(DegradeRequest(headroom=0.25)) is None
