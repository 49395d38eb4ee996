"""QuotaSettings: LLM_GUARD_QUOTA_* parsed strictly, errors naming the variable."""

from __future__ import annotations

import pytest

from llm_guard_sdk import ConfigError
from llm_guard_sdk.quota import QuotaRecorder, QuotaSettings


def test_defaults_and_environment() -> None:
    assert QuotaSettings.from_env({}) == QuotaSettings()
    settings = QuotaSettings.from_env({
        "LLM_GUARD_QUOTA_WINDOW": "5", "LLM_GUARD_QUOTA_RING_SIZE": "12",
        "LLM_GUARD_QUOTA_ADMISSION": "on", "LLM_GUARD_QUOTA_FILE": "/var/lib/q.json",
        "LLM_GUARD_QUOTA_TARGET": "HELD", "LLM_GUARD_QUOTA_SESSION_SECONDS": "30",
    })
    assert settings == QuotaSettings(window=5.0, ring_size=12, admission=True,
                                     file="/var/lib/q.json", target="held", session_seconds=30.0)


@pytest.mark.parametrize(("name", "value", "accepted"), [
    ("LLM_GUARD_QUOTA_WINDOW", "0", "seconds > 0"),
    ("LLM_GUARD_QUOTA_WINDOW", "ten", "seconds > 0"),
    ("LLM_GUARD_QUOTA_RING_SIZE", "0", "integer >= 1"),
    ("LLM_GUARD_QUOTA_ADMISSION", "maybe", "boolean"),
    ("LLM_GUARD_QUOTA_TARGET", "rss", "process, held"),
    ("LLM_GUARD_QUOTA_SESSION_SECONDS", "-3", "seconds > 0"),
])
def test_an_invalid_value_names_the_variable(name: str, value: str, accepted: str) -> None:
    with pytest.raises(ConfigError) as raised:
        QuotaSettings.from_env({name: value})
    assert f"{name}={value!r} is invalid" in str(raised.value)
    assert accepted in str(raised.value)


def test_a_misspelt_variable_warns_with_a_hint(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("LLM_GUARD_QUOTA_WINDWO", "5")
    QuotaRecorder()  # reads the environment when given no settings
    assert "did you mean LLM_GUARD_QUOTA_WINDOW" in caplog.text


def test_keyword_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="window=-1"):
        QuotaSettings(window=-1)
