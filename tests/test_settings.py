"""The strict settings machinery (settings.py) as an extension's settings class uses it."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.settings import (
    COUNT,
    NON_NEGATIVE,
    SIZE_FORM,
    Rule,
    Settings,
    flag,
    size,
    token,
)


@dataclass(frozen=True, slots=True)
class DemoSettings(Settings):
    ENV_PREFIX: ClassVar[str] = "LLM_GUARD_DEMOX_"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "grace": Rule(NON_NEGATIVE, "expected seconds >= 0, e.g. 5"),
        "workers": Rule(COUNT, "expected an integer >= 1, e.g. 4"),
        "budget": Rule(size, f"expected {SIZE_FORM}", text=True),
        "enabled": Rule(flag, "expected a boolean"),
        "key": Rule(token, "expected >= 8 printable characters", secret=True),
    }

    grace: float = 5.0
    workers: int = 1
    budget: int = 1024
    enabled: bool = False
    key: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class QuietSettings(Settings):
    ENV_PREFIX: ClassVar[str] = "LLM_GUARD_DEMOX_"
    RULES: ClassVar[Mapping[str, Rule]] = {"grace": Rule(NON_NEGATIVE, "seconds >= 0")}
    WARN_UNKNOWN: ClassVar[bool] = False

    grace: float = 5.0


def test_env_values_are_parsed_and_normalised() -> None:
    settings = DemoSettings.from_env({
        "LLM_GUARD_DEMOX_GRACE": "2", "LLM_GUARD_DEMOX_BUDGET": "1KiB",
        "LLM_GUARD_DEMOX_ENABLED": "yes", "LLM_GUARD_DEMOX_WORKERS": " 3 ",
    })
    assert (settings.grace, settings.budget, settings.enabled, settings.workers) == (
        2.0, 1024, True, 3)


def test_errors_name_the_variable_the_value_and_the_form() -> None:
    with pytest.raises(ConfigError, match=r"^LLM_GUARD_DEMOX_WORKERS='0' is invalid: expected "
                                          r"an integer >= 1, e.g. 4$"):
        DemoSettings.from_env({"LLM_GUARD_DEMOX_WORKERS": "0"})
    with pytest.raises(ConfigError, match=r"^workers=0 is invalid"):
        DemoSettings(workers=0)


def test_unknown_variables_are_a_warning_with_a_hint(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "llm_guard_sdk")
    assert DemoSettings.from_env({"LLM_GUARD_DEMOX_GRAC": "1"}) == DemoSettings.defaults()
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert ("unknown variable LLM_GUARD_DEMOX_GRAC (did you mean LLM_GUARD_DEMOX_GRACE?)"
            in record.getMessage())


def test_a_class_sharing_its_prefix_leaves_the_warning_to_another(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "llm_guard_sdk")
    assert QuietSettings.from_env({"LLM_GUARD_DEMOX_GRAC": "1"}).grace == 5.0
    assert caplog.records == []


def test_calling_the_class_reads_the_environment_under_the_arguments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_GUARD_DEMOX_GRACE", "2")
    monkeypatch.setenv("LLM_GUARD_DEMOX_WORKERS", "3")
    settings = DemoSettings(workers=4)
    assert (settings.grace, settings.workers) == (2.0, 4)
    assert DemoSettings.defaults(workers=4).grace == 5.0
    with pytest.raises(ConfigError, match=r"^unknown setting grac; valid settings are: grace"):
        DemoSettings.defaults(grac=1)
    monkeypatch.setenv("LLM_GUARD_DEMOX_WORKERS", "0")
    with pytest.raises(ConfigError, match=r"^LLM_GUARD_DEMOX_WORKERS='0' is invalid"):
        DemoSettings(grace=1)


def test_secrets_are_never_echoed() -> None:
    with pytest.raises(ConfigError, match=r"LLM_GUARD_DEMOX_KEY=<hidden, 3 chars> is invalid"):
        DemoSettings.from_env({"LLM_GUARD_DEMOX_KEY": "abc"})
    assert DemoSettings(key="abcdefghij").describe()["key"] == "***"
