"""Built-in extensions switched on by the core settings (``LLM_GUARD_BREAKERS=1``, ...)."""

from __future__ import annotations

import importlib.util

import pytest

from llm_guard_sdk import GuardConfig
from llm_guard_sdk.actions import AdaptiveTimeouts
from llm_guard_sdk.breakers import Breakers
from llm_guard_sdk.degrade import Degrader
from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.extensions import BUILTIN_EXTENSIONS, SWITCHES, configured_extensions
from llm_guard_sdk.policy import Level
from llm_guard_sdk.quota import QuotaRecorder
from tests.support import make_guard


@pytest.mark.parametrize(("env", "expected"), [
    ({}, ["dashboard"]),  # on by default
    ({"LLM_GUARD_DASHBOARD": "0"}, []),
    ({"LLM_GUARD_LEAKS": "1"}, ["leaks", "dashboard"]),
    ({"LLM_GUARD_ADAPTIVE_TIMEOUTS": "on"}, ["timeouts", "dashboard"]),
    ({"LLM_GUARD_BREAKERS": "yes"}, ["breakers", "dashboard"]),
    ({"LLM_GUARD_QUOTA": "true"}, ["quota", "dashboard"]),
    ({"LLM_GUARD_DEGRADE": "1"}, ["degrade", "dashboard"]),
    ({"LLM_GUARD_DEGRADE": "off", "LLM_GUARD_BREAKERS": "0"}, ["dashboard"]),
    ({"LLM_GUARD_DEGRADE": "evict", "LLM_GUARD_BREAKERS": "1", "LLM_GUARD_QUOTA": "1",
      "LLM_GUARD_DASHBOARD": "off"}, ["breakers", "quota", "degrade"]),
])
def test_environment_switches_name_the_extensions(env: dict[str, str],
                                                  expected: list[str]) -> None:
    # LLM_GUARD_METRICS=0: "metrics" is on by default wherever prometheus-client is installed.
    config = GuardConfig.from_env({"LLM_GUARD_METRICS": "0", **env})
    assert configured_extensions(config) == expected


@pytest.mark.parametrize(("text", "found", "expected"), [
    ("auto", True, ["metrics"]), ("auto", False, []), ("", True, ["metrics"]),
    ("1", False, ["metrics"]), ("on", True, ["metrics"]), ("0", True, []), ("off", False, [])])
def test_metrics_switch_is_auto_by_default(monkeypatch: pytest.MonkeyPatch, text: str,
                                           found: bool, expected: list[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: (
        (real(name) if found else None) if name == "prometheus_client" else real(name)))
    config = GuardConfig.from_env({"LLM_GUARD_METRICS": text, "LLM_GUARD_DASHBOARD": "0"})
    assert configured_extensions(config) == expected


def test_bad_metrics_switch_fails_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"LLM_GUARD_METRICS=.* is invalid: expected auto"):
        GuardConfig.from_env({"LLM_GUARD_METRICS": "sometimes"})


def test_every_switch_is_a_builtin_extension_and_a_core_setting() -> None:
    assert set(SWITCHES) <= set(BUILTIN_EXTENSIONS)
    names = GuardConfig.env_names()
    assert {names[field] for field in SWITCHES.values()} == {
        "LLM_GUARD_LEAKS", "LLM_GUARD_ADAPTIVE_TIMEOUTS", "LLM_GUARD_BREAKERS",
        "LLM_GUARD_QUOTA", "LLM_GUARD_DEGRADE", "LLM_GUARD_METRICS",
        "LLM_GUARD_DASHBOARD"}


@pytest.mark.parametrize(("text", "level"), [
    ("1", "warn"), ("on", "warn"), (" WARN ", "warn"), ("evict", "evict"), ("normal", "normal"),
    ("0", None), ("off", None), ("no", None)])
def test_degrade_switch_is_a_level_or_off(text: str, level: str | None) -> None:
    assert GuardConfig.from_env({"LLM_GUARD_DEGRADE": text}).degrade == level


@pytest.mark.parametrize("text", ["shed", "sometimes", "2"])
def test_bad_degrade_switch_fails_naming_it(text: str) -> None:
    with pytest.raises(ConfigError, match=r"LLM_GUARD_DEGRADE=.* is invalid: expected off, on"):
        GuardConfig.from_env({"LLM_GUARD_DEGRADE": text})


def test_switched_on_extensions_are_set_up_and_report() -> None:
    guard = make_guard(adaptive_timeouts=True, breakers=True, quota=True, degrade="evict")
    timeouts = guard.extension("timeouts")
    degrader = guard.extension("degrade")
    assert isinstance(timeouts, AdaptiveTimeouts) and timeouts.settings.enabled  # applied too
    assert isinstance(guard.extension("breakers"), Breakers)
    assert isinstance(guard.extension("quota"), QuotaRecorder)
    assert isinstance(degrader, Degrader) and degrader.level is Level.EVICT
    doc = guard.status()
    assert {"timeouts", "breakers", "quota", "degraded"} <= set(doc)
    assert doc["degraded"]["max_tokens"] == 0


def test_defaults_ignore_the_environment_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LLM_GUARD_BREAKERS", "LLM_GUARD_QUOTA", "LLM_GUARD_ADAPTIVE_TIMEOUTS"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("LLM_GUARD_DEGRADE", "warn")
    monkeypatch.setenv("LLM_GUARD_METRICS", "0")
    monkeypatch.setenv("LLM_GUARD_DASHBOARD", "0")
    guard = make_guard()
    # Only the default-on extensions, whatever the environment: the dashboard, and "metrics"
    # (auto) where prometheus-client is installed.
    default_on = {"dashboard"} | ({"metrics"} if importlib.util.find_spec("prometheus_client")
                                  else set())
    assert set(guard.extensions) == default_on
    assert {"breakers", "degraded", "timeouts"}.isdisjoint(guard.status())
