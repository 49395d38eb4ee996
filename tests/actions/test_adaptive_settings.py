"""AdaptiveTimeoutSettings: defaults, environment names, and errors naming the setting."""

from __future__ import annotations

import pytest

from llm_guard_sdk import ConfigError
from llm_guard_sdk.actions import AdaptiveTimeoutSettings


def test_settings_default_off_and_read_their_variables() -> None:
    assert AdaptiveTimeoutSettings().enabled is False
    s = AdaptiveTimeoutSettings.from_env({
        "LLM_GUARD_ADAPTIVE_TIMEOUTS": "on", "LLM_GUARD_TIMEOUT_MIN": "1",
        "LLM_GUARD_TIMEOUT_MAX": "30", "LLM_GUARD_TIMEOUT_P99_FACTOR": "2",
        "LLM_GUARD_TIMEOUT_JITTER": "0.25", "LLM_GUARD_TIMEOUT_MIN_SAMPLES": "50",
        "LLM_GUARD_CHUNK_TIMEOUT": "30",  # another class's variable: not ours to judge
    })
    assert (s.enabled, s.min_timeout, s.max_timeout, s.p99_factor, s.jitter, s.min_samples) == (
        True, 1.0, 30.0, 2.0, 0.25, 50)


@pytest.mark.parametrize(("env", "named"), [
    ({"LLM_GUARD_TIMEOUT_MIN": "50"}, "LLM_GUARD_TIMEOUT_MIN='50'"),
    ({"LLM_GUARD_TIMEOUT_MAX": "1"}, "LLM_GUARD_TIMEOUT_MAX='1'"),
    ({"LLM_GUARD_TIMEOUT_JITTER": "-0.5"}, "LLM_GUARD_TIMEOUT_JITTER='-0.5'"),
    ({"LLM_GUARD_TIMEOUT_P99_FACTOR": "-1"}, "LLM_GUARD_TIMEOUT_P99_FACTOR='-1'"),
    ({"LLM_GUARD_TIMEOUT_MIN_SAMPLES": "0"}, "LLM_GUARD_TIMEOUT_MIN_SAMPLES='0'"),
    ({"LLM_GUARD_ADAPTIVE_TIMEOUTS": "maybe"}, "LLM_GUARD_ADAPTIVE_TIMEOUTS='maybe'"),
])
def test_bad_settings_fail_naming_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        AdaptiveTimeoutSettings.from_env(env)
    assert named in str(info.value)


def test_a_misspelt_variable_warns_with_a_hint(caplog: pytest.LogCaptureFixture) -> None:
    settings = AdaptiveTimeoutSettings.from_env({"LLM_GUARD_TIMEOUT_MINIMUM": "1"})
    assert settings.min_timeout == AdaptiveTimeoutSettings.defaults().min_timeout
    assert "unknown variable LLM_GUARD_TIMEOUT_MINIMUM (did you mean LLM_GUARD_TIMEOUT_MIN?)" \
        in caplog.text


def test_inverted_bounds_name_both_settings() -> None:
    # Both changed: the higher one is blamed (as GuardConfig does for its thresholds).
    with pytest.raises(ConfigError, match=r"max_timeout=5.0 is invalid: the clamp bounds are "
                       r"inverted: min_timeout \(10.0\) must be <= max_timeout \(5.0\)"):
        AdaptiveTimeoutSettings(min_timeout=10, max_timeout=5)


def test_inverted_bounds_from_the_environment_name_both_variables() -> None:
    with pytest.raises(ConfigError) as info:
        AdaptiveTimeoutSettings.from_env({"LLM_GUARD_TIMEOUT_MIN": "50"})
    assert str(info.value) == (
        "LLM_GUARD_TIMEOUT_MIN='50' is invalid: the clamp bounds are inverted: "
        "LLM_GUARD_TIMEOUT_MIN (50.0) must be <= LLM_GUARD_TIMEOUT_MAX (45.0)")
