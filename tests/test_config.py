"""Tests for llm_guard_sdk.config: parsing, validation, env handling and error wording."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from typing import Any

import pytest

from llm_guard_sdk.config import EXTENSION_VARS, GuardConfig, parse_size
from llm_guard_sdk.errors import ConfigError, GuardError

ENV = GuardConfig.env_names()
KiB, MiB, GiB, TiB = 1024, 1024**2, 1024**3, 1024**4

DEFAULTS: dict[str, Any] = {
    "memory_limit": None,
    "warn_at": 0.75,
    "evict_at": 0.85,
    "shed_at": 0.92,
    "hysteresis": 0.05,
    "sample_interval": 0.25,
    "idle_timeout": 300.0,
    "idle_timeout_level": "warn",
    "min_session_age": 30.0,
    "max_sessions": 10000,
    "status_token": None,
    "retry_after": 5,
    "chunk_timeout": None,
    "stream_timeout": None,
    "max_evictions_per_tick": 50,
    "snapshot_ring_size": 32,
    "sources": ("process", "cgroup", "host"),
    "route_prefix": "/llm-guard",
    "exempt_paths": ("/health*", "/ready*", "/livez", "/metrics"),
    "trim_heap": True,
    "size_budget_ms": 2.0,
    "admission_projection": True,
    "projection_window": 32,
    "close_grace": 2.0,
    "send_timeout": 30.0,
    "max_inbound_buffer": 1048576,
    "leaks": False,
    "adaptive_timeouts": False,
    "breakers": False,
    "quota": False,
    "degrade": None,
    "metrics": None,
    "dashboard": True,
    "shed_ceiling": None,
    "tenant_header": None,
    "tenant_default": "default",
    "tenant_max_sessions": None,
    "tenant_max_held_bytes": None,
    "tenant_priorities": (),
    "priority_header": None,
    "tenant_status_top": 10,
}

# Every variable set to a non-default value, and what each must become.
FULL_ENV = {
    "LLM_GUARD_MEMORY_LIMIT": "2GiB",
    "LLM_GUARD_WARN_AT": "0.6",
    "LLM_GUARD_EVICT_AT": "0.7",
    "LLM_GUARD_SHED_AT": "0.8",
    "LLM_GUARD_HYSTERESIS": "0.1",
    "LLM_GUARD_SAMPLE_INTERVAL": "0.5",
    "LLM_GUARD_IDLE_TIMEOUT": "60",
    "LLM_GUARD_IDLE_TIMEOUT_LEVEL": " Normal ",
    "LLM_GUARD_MIN_SESSION_AGE": "0",
    "LLM_GUARD_MAX_SESSIONS": "20",
    "LLM_GUARD_STATUS_TOKEN": "s3cret-token!",
    "LLM_GUARD_RETRY_AFTER": "0",
    "LLM_GUARD_CHUNK_TIMEOUT": "15",
    "LLM_GUARD_STREAM_TIMEOUT": "120.5",
    "LLM_GUARD_MAX_EVICTIONS_PER_TICK": "3",
    "LLM_GUARD_SNAPSHOT_RING": "8",
    "LLM_GUARD_SOURCES": " cgroup , host ",
    "LLM_GUARD_ROUTE_PREFIX": "/ops/guard_v1.2~x",
    "LLM_GUARD_EXEMPT_PATHS": "/healthz, /admin/ops, /probe*",
    "LLM_GUARD_TRIM_HEAP": "off",
    "LLM_GUARD_SIZE_BUDGET_MS": "0.5",
    "LLM_GUARD_ADMISSION_PROJECTION": "off",
    "LLM_GUARD_PROJECTION_WINDOW": "8",
    "LLM_GUARD_CLOSE_GRACE": "0",
    "LLM_GUARD_SEND_TIMEOUT": "0",
    "LLM_GUARD_MAX_INBOUND_BUFFER": "256KiB",
    "LLM_GUARD_LEAKS": "on",
    "LLM_GUARD_ADAPTIVE_TIMEOUTS": "yes",
    "LLM_GUARD_BREAKERS": "1",
    "LLM_GUARD_QUOTA": "true",
    "LLM_GUARD_METRICS": "0",
    "LLM_GUARD_DEGRADE": " Evict ",
    "LLM_GUARD_DASHBOARD": "off",
    "LLM_GUARD_SHED_CEILING": "0.9",
    "LLM_GUARD_TENANT_HEADER": "X-Tenant-Id",
    "LLM_GUARD_TENANT_DEFAULT": "anonymous",
    "LLM_GUARD_TENANT_MAX_SESSIONS": "4",
    "LLM_GUARD_TENANT_MAX_HELD_BYTES": "64Mi",
    "LLM_GUARD_TENANT_PRIORITIES": "b=low, a=HIGH",
    "LLM_GUARD_PRIORITY_HEADER": "x-priority",
    "LLM_GUARD_TENANT_STATUS_TOP": "3",
}
FULL_EXPECTED: dict[str, Any] = {
    "memory_limit": 2 * GiB,
    "warn_at": 0.6,
    "evict_at": 0.7,
    "shed_at": 0.8,
    "hysteresis": 0.1,
    "sample_interval": 0.5,
    "idle_timeout": 60.0,
    "idle_timeout_level": "normal",
    "min_session_age": 0.0,
    "max_sessions": 20,
    "status_token": "s3cret-token!",
    "retry_after": 0,
    "chunk_timeout": 15.0,
    "stream_timeout": 120.5,
    "max_evictions_per_tick": 3,
    "snapshot_ring_size": 8,
    "sources": ("cgroup", "host"),
    "route_prefix": "/ops/guard_v1.2~x",
    "exempt_paths": ("/healthz", "/admin/ops", "/probe*"),
    "trim_heap": False,
    "size_budget_ms": 0.5,
    "admission_projection": False,
    "projection_window": 8,
    "close_grace": 0.0,
    "send_timeout": None,
    "max_inbound_buffer": 256 * KiB,
    "leaks": True,
    "adaptive_timeouts": True,
    "breakers": True,
    "quota": True,
    "degrade": "evict",
    "metrics": False,
    "dashboard": False,
    "shed_ceiling": 0.9,
    "tenant_header": "x-tenant-id",
    "tenant_default": "anonymous",
    "tenant_max_sessions": 4,
    "tenant_max_held_bytes": 64 * MiB,
    "tenant_priorities": ("a=high", "b=low"),
    "priority_header": "x-priority",
    "tenant_status_top": 3,
}


def error_of(**kwargs: Any) -> str:
    with pytest.raises(ConfigError) as info:
        GuardConfig(**kwargs)
    return str(info.value)


def env_error_of(environ: dict[str, str], **overrides: Any) -> str:
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_env(environ, **overrides)
    return str(info.value)


# --- defaults, kwargs, env names --------------------------------------------------------


def test_defaults() -> None:
    config = GuardConfig()
    assert {f.name: getattr(config, f.name) for f in dataclasses.fields(config)} == DEFAULTS


def test_env_names_cover_every_field() -> None:
    assert list(ENV) == list(DEFAULTS)
    assert ENV["warn_at"] == "LLM_GUARD_WARN_AT"
    assert ENV["snapshot_ring_size"] == "LLM_GUARD_SNAPSHOT_RING"
    assert set(ENV.values()) == set(FULL_ENV)
    assert all(name.startswith("LLM_GUARD_") for name in ENV.values())


def test_full_fixture_differs_from_defaults_everywhere() -> None:
    assert all(FULL_EXPECTED[name] != DEFAULTS[name] for name in DEFAULTS)


def test_kwargs_are_stored() -> None:
    config = GuardConfig(**FULL_EXPECTED)
    for name, value in FULL_EXPECTED.items():
        assert getattr(config, name) == value, name


@pytest.mark.parametrize(
    ("kwargs", "name", "expected"),
    [
        ({"memory_limit": "512MiB"}, "memory_limit", 512 * MiB),
        ({"memory_limit": 16 * MiB}, "memory_limit", 16 * MiB),
        ({"memory_limit": "512Mi"}, "memory_limit", 512 * MiB),
        ({"memory_limit": "2Gi"}, "memory_limit", 2 * GiB),
        ({"memory_limit": "2G"}, "memory_limit", 2_000_000_000),
        ({"memory_limit": "2GiB"}, "memory_limit", 2 * GiB),
        ({"sample_interval": 0.01}, "sample_interval", 0.01),
        ({"memory_limit": ""}, "memory_limit", None),
        ({"max_inbound_buffer": "4MiB"}, "max_inbound_buffer", 4 * MiB),
        ({"sources": ["host"]}, "sources", ("host",)),
        ({"sources": "process, CGROUP"}, "sources", ("process", "cgroup")),
        ({"sources": ("cgroup", "process")}, "sources", ("cgroup", "process")),
        ({"warn_at": 0.5, "evict_at": 0.9, "shed_at": 1}, "shed_at", 1.0),
        ({"idle_timeout": 5}, "idle_timeout", 5.0),
        ({"chunk_timeout": 0}, "chunk_timeout", None),
        ({"stream_timeout": 0.0}, "stream_timeout", None),
        ({"chunk_timeout": 2}, "chunk_timeout", 2.0),
        ({"status_token": ""}, "status_token", None),
        ({"hysteresis": 0}, "hysteresis", 0.0),
    ],
)
def test_kwargs_are_normalised(kwargs: dict[str, Any], name: str, expected: object) -> None:
    value = getattr(GuardConfig(**kwargs), name)
    assert value == expected
    assert type(value) is type(expected)


def test_frozen() -> None:
    config = GuardConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.warn_at = 0.5  # type: ignore[misc]


def test_config_error_is_value_error_and_guard_error() -> None:
    with pytest.raises(ConfigError) as info:
        GuardConfig(warn_at=2.0)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, GuardError)


# --- parse_size ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (1, 1),
        (1048576, 1048576),
        ("1048576", 1048576),
        ("1B", 1),
        ("1KB", 1000),
        ("1MB", 1000**2),
        ("1GB", 1000**3),
        ("1TB", 1000**4),
        ("1KiB", KiB),
        ("1MiB", MiB),
        ("1GiB", GiB),
        ("1TiB", TiB),
        ("1K", 1000),
        ("1k", 1000),
        ("1M", 1000**2),
        ("1G", 1000**3),
        ("2G", 2 * 10**9),
        ("1T", 1000**4),
        ("1Ki", KiB),
        ("512Mi", 512 * MiB),
        ("2Gi", 2 * GiB),
        ("1Ti", TiB),
        ("512mi", 512 * MiB),
        ("512mib", 512 * MiB),
        ("2gib", 2 * GiB),
        ("3kb", 3000),
        ("7b", 7),
        ("1.5GiB", 3 * GiB // 2),
        ("1.5 GiB", 3 * GiB // 2),
        ("0.5K", 500),
        ("0.5Ki", 512),
        (".5KiB", 512),
        ("1.0015KB", 1001),  # rounded down
        ("1.9B", 1),
        ("  4 MiB  ", 4 * MiB),
        ("10 MB", 10_000_000),
    ],
)
def test_parse_size_valid(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "12XB", "-1", "0", "abc", "", "   ", "0B", "0.1B", "0KiB", "1.5", "1e3", "GiB",
        "1..5K", "1.K", "1 2", "1 GiB extra", "1_000", "+5", "\u0663K", 0, -5, True, False,
        "512m", "2g", "1t", "Mi", "1Xi",
    ],
)
def test_parse_size_invalid(text: str | int) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


# --- validation errors (kwargs: field names in messages) --------------------------------

FRACTION = "expected a fraction in (0, 1]"
SECONDS_POS = "expected seconds > 0"
SECONDS_NONNEG = "expected seconds >= 0"
INT_MIN1 = "expected an integer >= 1"
SIZE = "expected a size: bytes, or a number with a unit"
LIMIT = "at least 16Mi"
BOOL = "expected a boolean: 1/0, true/false, yes/no or on/off"
NO_LIMIT = "expected seconds > 0, or 0/empty for no limit"
SOURCES = "expected distinct comma-separated items out of process, cgroup, host"
ROUTE = "expected a path starting but not ending with '/'"


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("warn_at", 1.5, FRACTION),
        ("warn_at", 0, FRACTION),
        ("warn_at", -0.1, FRACTION),
        ("warn_at", "x", FRACTION),
        ("warn_at", "0.5", FRACTION),
        ("warn_at", True, FRACTION),
        ("warn_at", None, FRACTION),
        ("warn_at", math.nan, FRACTION),
        ("evict_at", 1.01, FRACTION),
        ("shed_at", 0.0, FRACTION),
        ("hysteresis", -0.01, "expected a fraction >= 0 and below warn_at"),
        ("hysteresis", math.inf, "expected a fraction >= 0 and below warn_at"),
        ("sample_interval", 0, "expected seconds >= 0.01"),
        ("sample_interval", math.inf, "expected seconds >= 0.01"),
        ("idle_timeout", -1, SECONDS_POS),
        ("idle_timeout_level", "always", "expected the lowest level that closes idle sessions"),
        ("idle_timeout_level", "warn,evict", "normal (always), warn, evict or shed"),
        ("idle_timeout_level", 1, "normal (always), warn, evict or shed"),
        ("min_session_age", -1, SECONDS_NONNEG),
        ("close_grace", -0.5, SECONDS_NONNEG),
        ("send_timeout", -1, "expected seconds > 0, or 0/empty for no limit"),
        ("size_budget_ms", 0, "expected milliseconds > 0"),
        ("projection_window", 0, INT_MIN1),
        ("admission_projection", "maybe", BOOL),
        ("max_sessions", 0, INT_MIN1),
        ("max_sessions", 1.5, INT_MIN1),
        ("max_sessions", 10.0, INT_MIN1),
        ("max_sessions", True, INT_MIN1),
        ("max_sessions", "10", INT_MIN1),
        ("max_evictions_per_tick", 0, INT_MIN1),
        ("snapshot_ring_size", -3, INT_MIN1),
        ("retry_after", -1, "expected whole seconds >= 0"),
        ("retry_after", 1.5, "expected whole seconds >= 0"),
        ("chunk_timeout", -1, NO_LIMIT),
        ("chunk_timeout", "x", NO_LIMIT),
        ("stream_timeout", -5.0, NO_LIMIT),
        ("stream_timeout", False, NO_LIMIT),
        ("sources", "", SOURCES),
        ("sources", [], SOURCES),
        ("sources", "process,disk", SOURCES),
        ("sources", "process,process", SOURCES),
        ("sources", "process,", SOURCES),
        ("sources", ["process", 1], SOURCES),
        ("sources", 7, SOURCES),
        ("route_prefix", "llm-guard", ROUTE),
        ("route_prefix", "/llm-guard/", ROUTE),
        ("route_prefix", "/", ROUTE),
        ("route_prefix", "", ROUTE),
        ("route_prefix", "/llm guard", ROUTE),
        ("route_prefix", "/guard?x=1", ROUTE),
        ("route_prefix", None, ROUTE),
        ("exempt_paths", "healthz", "expected comma-separated path prefixes"),
        ("exempt_paths", "/ok,/bad/", "expected comma-separated path prefixes"),
        ("exempt_paths", 5, "expected comma-separated path prefixes"),
        ("exempt_paths", "/*", "expected comma-separated path prefixes"),
        ("exempt_paths", "/he*lth", "expected comma-separated path prefixes"),
        ("exempt_paths", "/health**", "expected comma-separated path prefixes"),
        ("trim_heap", "yes", BOOL),
        ("memory_limit", "12XB", SIZE),
        ("memory_limit", 0, SIZE),
        ("memory_limit", -1, SIZE),
        ("memory_limit", 1.5, SIZE),
        ("memory_limit", 512, LIMIT),
        ("memory_limit", "15Mi", LIMIT),
        ("memory_limit", "512m", SIZE),
        ("sample_interval", 0.009, "expected seconds >= 0.01"),
        ("max_inbound_buffer", 0, SIZE),
        ("max_inbound_buffer", "lots", SIZE),
    ],
)
def test_kwargs_validation_error(name: str, value: object, accepted: str) -> None:
    message = error_of(**{name: value})
    assert message.startswith(f"{name}={value!r} is invalid: ")
    assert accepted in message
    assert "LLM_GUARD_" not in message


def test_hysteresis_must_stay_below_warn_at() -> None:
    message = error_of(hysteresis=0.75)
    assert message == (
        "hysteresis=0.75 is invalid: expected a fraction >= 0 and below warn_at (0.75), e.g. 0.05"
    )
    assert GuardConfig(hysteresis=0.74).hysteresis == 0.74


def test_error_message_example_from_docs() -> None:
    assert error_of(warn_at=1.5) == (
        "warn_at=1.5 is invalid: expected a fraction in (0, 1], e.g. 0.75"
    )
    assert env_error_of({"LLM_GUARD_WARN_AT": "1.5"}) == (
        "LLM_GUARD_WARN_AT='1.5' is invalid: expected a fraction in (0, 1], e.g. 0.75"
    )


@pytest.mark.parametrize(
    ("kwargs", "blamed", "order"),
    [
        ({"warn_at": 0.9}, "warn_at", "warn_at (0.9) < evict_at (0.85) < shed_at (0.92)"),
        ({"warn_at": 0.85}, "warn_at", "warn_at (0.85) < evict_at (0.85) < shed_at (0.92)"),
        ({"evict_at": 0.7}, "evict_at", "warn_at (0.75) < evict_at (0.7) < shed_at (0.92)"),
        ({"evict_at": 0.95}, "evict_at", "warn_at (0.75) < evict_at (0.95) < shed_at (0.92)"),
        ({"shed_at": 0.8}, "shed_at", "warn_at (0.75) < evict_at (0.85) < shed_at (0.8)"),
        ({"shed_at": 0.85}, "shed_at", "warn_at (0.75) < evict_at (0.85) < shed_at (0.85)"),
        (
            {"warn_at": 0.5, "evict_at": 0.5},
            "evict_at",
            "warn_at (0.5) < evict_at (0.5) < shed_at (0.92)",
        ),
    ],
)
def test_thresholds_must_increase_strictly(
    kwargs: dict[str, float], blamed: str, order: str
) -> None:
    message = error_of(**kwargs)
    assert message == (
        f"{blamed}={kwargs.get(blamed, DEFAULTS[blamed])!r} is invalid: "
        f"thresholds must increase strictly: {order}, each in (0, 1]"
    )


@pytest.mark.parametrize(
    "token", ["short", "1234567", "has space in it", "tab\there!!", "na\u00efve-token"]
)
def test_bad_token_is_rejected_without_echoing_it(token: str) -> None:
    message = error_of(status_token=token)
    assert message.startswith(f"status_token=<hidden, {len(token)} chars> is invalid: ")
    assert "expected >= 8 printable ASCII characters without spaces" in message
    assert token not in message


def test_non_string_token_is_rejected() -> None:
    message = error_of(status_token=12345678)
    assert message.startswith("status_token=12345678 is invalid: ")


def test_valid_token_is_kept_but_hidden() -> None:
    config = GuardConfig(status_token="abc!DEF~123")
    assert config.status_token == "abc!DEF~123"
    assert "abc!DEF~123" not in repr(config)
    assert config.describe()["status_token"] == "***"


# --- from_env ---------------------------------------------------------------------------


def test_from_env_reads_every_variable() -> None:
    config = GuardConfig.from_env(FULL_ENV)
    for name, value in FULL_EXPECTED.items():
        assert getattr(config, name) == value, name


def test_from_env_empty_mapping_gives_defaults() -> None:
    assert GuardConfig.from_env({}) == GuardConfig()


def test_from_env_ignores_unrelated_variables() -> None:
    assert GuardConfig.from_env({"PATH": "/bin", "LLM_GUARDIAN": "x"}) == GuardConfig()


def test_from_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LLM_GUARD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LLM_GUARD_WARN_AT", "0.5")
    assert GuardConfig.from_env().warn_at == 0.5


def test_from_env_overrides_win() -> None:
    config = GuardConfig.from_env(
        {"LLM_GUARD_WARN_AT": "0.5", "LLM_GUARD_SOURCES": "host"},
        warn_at=0.6,
        sources=["cgroup"],
        max_sessions=7,
    )
    assert (config.warn_at, config.sources, config.max_sessions) == (0.6, ("cgroup",), 7)


def test_from_env_override_replaces_invalid_env_value() -> None:
    assert GuardConfig.from_env({"LLM_GUARD_WARN_AT": "bogus"}, warn_at=0.5).warn_at == 0.5


@pytest.mark.parametrize("name", sorted(FULL_ENV))
@pytest.mark.parametrize("blank", ["", "   "])
def test_from_env_empty_value_means_unset(name: str, blank: str) -> None:
    field = next(f for f, env in ENV.items() if env == name)
    assert getattr(GuardConfig.from_env({name: blank}), field) == DEFAULTS[field]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1", True), ("true", True), ("TRUE", True), ("Yes", True), ("on", True), (" On ", True),
        ("0", False), ("false", False), ("False", False), ("no", False), ("OFF", False),
    ],
)
def test_from_env_bool_spellings(text: str, expected: bool) -> None:
    config = GuardConfig.from_env({"LLM_GUARD_TRIM_HEAP": text, "LLM_GUARD_LEAKS": text})
    assert config.trim_heap is expected
    assert config.leaks is expected


@pytest.mark.parametrize(
    ("name", "value"),
    [("LLM_GUARD_CHUNK_TIMEOUT", "0"), ("LLM_GUARD_STREAM_TIMEOUT", "0.0")],
)
def test_from_env_zero_timeout_means_no_limit(name: str, value: str) -> None:
    config = GuardConfig.from_env({name: value})
    assert config.chunk_timeout is None
    assert config.stream_timeout is None


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("LLM_GUARD_WARN_AT", "1.5", FRACTION),
        ("LLM_GUARD_WARN_AT", "abc", FRACTION),
        ("LLM_GUARD_EVICT_AT", "0", FRACTION),
        ("LLM_GUARD_SHED_AT", "nan", FRACTION),
        ("LLM_GUARD_HYSTERESIS", "-0.1", "expected a fraction >= 0 and below LLM_GUARD_WARN_AT"),
        ("LLM_GUARD_HYSTERESIS", "0.8", "below LLM_GUARD_WARN_AT (0.75)"),
        ("LLM_GUARD_SAMPLE_INTERVAL", "0", "expected seconds >= 0.01"),
        ("LLM_GUARD_SAMPLE_INTERVAL", "0.005", "expected seconds >= 0.01"),
        ("LLM_GUARD_SAMPLE_INTERVAL", "inf", "expected seconds >= 0.01"),
        ("LLM_GUARD_IDLE_TIMEOUT", "-5", SECONDS_POS),
        ("LLM_GUARD_MIN_SESSION_AGE", "-1", SECONDS_NONNEG),
        ("LLM_GUARD_MAX_SESSIONS", "0", INT_MIN1),
        ("LLM_GUARD_MAX_SESSIONS", "1.5", INT_MIN1),
        ("LLM_GUARD_MAX_SESSIONS", "many", INT_MIN1),
        ("LLM_GUARD_RETRY_AFTER", "-1", "expected whole seconds >= 0"),
        ("LLM_GUARD_RETRY_AFTER", "2.5", "expected whole seconds >= 0"),
        ("LLM_GUARD_CHUNK_TIMEOUT", "-1", NO_LIMIT),
        ("LLM_GUARD_STREAM_TIMEOUT", "forever", NO_LIMIT),
        ("LLM_GUARD_MAX_EVICTIONS_PER_TICK", "0", INT_MIN1),
        ("LLM_GUARD_SNAPSHOT_RING", "0", INT_MIN1),
        ("LLM_GUARD_SOURCES", "process,gpu", SOURCES),
        ("LLM_GUARD_SOURCES", "host,host", SOURCES),
        ("LLM_GUARD_SOURCES", ",", SOURCES),
        ("LLM_GUARD_ROUTE_PREFIX", "guard", ROUTE),
        ("LLM_GUARD_ROUTE_PREFIX", "/guard/", ROUTE),
        ("LLM_GUARD_ROUTE_PREFIX", "/gu ard", ROUTE),
        ("LLM_GUARD_TRIM_HEAP", "maybe", BOOL),
        ("LLM_GUARD_TRIM_HEAP", "2", BOOL),
        ("LLM_GUARD_SIZE_BUDGET_MS", "0", "expected milliseconds > 0"),
        ("LLM_GUARD_CLOSE_GRACE", "-1", SECONDS_NONNEG),
        ("LLM_GUARD_MEMORY_LIMIT", "12XB", SIZE),
        ("LLM_GUARD_MEMORY_LIMIT", "-1", SIZE),
        ("LLM_GUARD_MEMORY_LIMIT", "0", SIZE),
        ("LLM_GUARD_MEMORY_LIMIT", "abc", SIZE),
        ("LLM_GUARD_MEMORY_LIMIT", "512", LIMIT),
        ("LLM_GUARD_MEMORY_LIMIT", "8Mi", LIMIT),
    ],
)
def test_from_env_validation_error(name: str, value: str, accepted: str) -> None:
    message = env_error_of({name: value})
    assert message.startswith(f"{name}={value!r} is invalid: ")
    assert accepted in message
    field = next(f for f, env in ENV.items() if env == name)
    assert not message.startswith(f"{field}=")


def test_from_env_bad_token_hidden() -> None:
    message = env_error_of({"LLM_GUARD_STATUS_TOKEN": "short"})
    assert message.startswith("LLM_GUARD_STATUS_TOKEN=<hidden, 5 chars> is invalid: ")
    assert "short" not in message


def test_from_env_ordering_uses_env_names() -> None:
    message = env_error_of({"LLM_GUARD_EVICT_AT": "0.95"})
    assert message == (
        "LLM_GUARD_EVICT_AT='0.95' is invalid: thresholds must increase strictly: "
        "LLM_GUARD_WARN_AT (0.75) < LLM_GUARD_EVICT_AT (0.95) < LLM_GUARD_SHED_AT (0.92), "
        "each in (0, 1]"
    )


def test_from_env_override_errors_use_field_names() -> None:
    message = env_error_of({}, warn_at=2.0)
    assert message.startswith("warn_at=2.0 is invalid: expected a fraction in (0, 1]")
    message = env_error_of({"LLM_GUARD_WARN_AT": "0.9"}, evict_at=0.8)
    assert message == (
        "evict_at=0.8 is invalid: thresholds must increase strictly: "
        "LLM_GUARD_WARN_AT (0.9) < evict_at (0.8) < LLM_GUARD_SHED_AT (0.92), each in (0, 1]"
    )


def test_from_env_error_is_plain_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        GuardConfig.from_env({"LLM_GUARD_WARN_AT": "2"})
    assert type(info.value) is ConfigError
    assert info.value.__cause__ is None


def unknown_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and "unknown variable" in r.getMessage()]


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("LLM_GUARD_WARNAT", "LLM_GUARD_WARN_AT"),
        ("LLM_GUARD_MEMORY_LIMT", "LLM_GUARD_MEMORY_LIMIT"),
        ("LLM_GUARD_SNAPSHOT_RING_SIZE", "LLM_GUARD_SNAPSHOT_RING"),
        ("LLM_GUARD_LEAK_GRACES", "LLM_GUARD_LEAK_GRACE"),  # an extension's variable
        ("LLM_GUARD_", None),
        ("LLM_GUARD_ENGINE_TMP", None),
    ],
)
def test_from_env_unknown_variable_is_a_warning_with_a_hint(
        caplog: pytest.LogCaptureFixture, name: str, suggestion: str | None) -> None:
    caplog.set_level(logging.WARNING, "llm_guard_sdk")
    config = GuardConfig.from_env({name: "1", "LLM_GUARD_WARN_AT": "0.5"})
    assert config.warn_at == 0.5  # start-up goes on (a rollback must not stop on a new name)
    (message,) = unknown_warnings(caplog)
    assert message.startswith(f"llm-guard: ignoring unknown variable {name}")
    if suggestion:
        assert f"(did you mean {suggestion}?)" in message
    assert all(env in message for env in ENV.values())


def test_from_env_warns_once_per_unknown_variable(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "llm_guard_sdk")
    GuardConfig.from_env({"LLM_GUARD_B": "1", "LLM_GUARD_A": "2", "LLM_GUARD_WARNAT": ""})
    messages = unknown_warnings(caplog)
    assert [m.split()[4] for m in messages] == ["LLM_GUARD_A", "LLM_GUARD_B", "LLM_GUARD_WARNAT"]


@pytest.mark.parametrize("name", sorted(EXTENSION_VARS))
def test_extension_variables_are_known_to_the_core(
        caplog: pytest.LogCaptureFixture, name: str) -> None:
    caplog.set_level(logging.WARNING, "llm_guard_sdk")
    GuardConfig.from_env({name: "1"})
    assert unknown_warnings(caplog) == []


def test_extension_variables_match_the_extensions_settings() -> None:
    from llm_guard_sdk.actions import AdaptiveTimeoutSettings
    from llm_guard_sdk.adapters.chat import ChatSettings
    from llm_guard_sdk.breakers import BreakerSettings
    from llm_guard_sdk.degrade import DegradeSettings
    from llm_guard_sdk.engines.vllm import VLLMSettings
    from llm_guard_sdk.leaks import LeakSettings
    from llm_guard_sdk.quota import QuotaSettings

    names = {n for cls in (LeakSettings, VLLMSettings, ChatSettings, QuotaSettings,
                           AdaptiveTimeoutSettings, BreakerSettings, DegradeSettings)
             for n in cls.env_names().values()}
    assert names == EXTENSION_VARS


# --- keyword arguments over the environment over the defaults ---------------------------


def clean_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    for name in list(os.environ):
        if name.startswith("LLM_GUARD_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def test_keyword_arguments_keep_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch, LLM_GUARD_STATUS_TOKEN="s3cret-token!", LLM_GUARD_WARN_AT="0.5",
              LLM_GUARD_MEMORY_LIMIT="1Gi")
    config = GuardConfig(memory_limit="2Gi")
    assert config.status_token == "s3cret-token!"  # was lost before: kwargs dropped the env
    assert (config.memory_limit, config.warn_at) == (2 * GiB, 0.5)  # kwarg > env > default
    assert config.evict_at == DEFAULTS["evict_at"]


def test_positional_arguments_count_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch, LLM_GUARD_MEMORY_LIMIT="1Gi", LLM_GUARD_WARN_AT="0.5")
    config = GuardConfig("2Gi")
    assert (config.memory_limit, config.warn_at) == (2 * GiB, 0.5)
    with pytest.raises(TypeError, match="multiple values"):
        GuardConfig("2Gi", memory_limit="1Gi")


def test_environment_errors_name_the_variable_even_with_kwargs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch, LLM_GUARD_MEMORY_LIMIT="abc")
    with pytest.raises(ConfigError, match=r"^LLM_GUARD_MEMORY_LIMIT='abc' is invalid"):
        GuardConfig(warn_at=0.5)


def test_defaults_ignore_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_env(monkeypatch, LLM_GUARD_MEMORY_LIMIT="abc", LLM_GUARD_WARN_AT="0.5")
    config = GuardConfig.defaults(evict_at=0.9)
    assert (config.memory_limit, config.warn_at, config.evict_at) == (None, 0.75, 0.9)
    assert config == GuardConfig.from_env({}, evict_at=0.9)


def test_replace_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    config = GuardConfig.defaults(warn_at=0.5)
    clean_env(monkeypatch, LLM_GUARD_MEMORY_LIMIT="abc", LLM_GUARD_EVICT_AT="0.9")
    changed = dataclasses.replace(config, shed_at=0.95)
    assert (changed.warn_at, changed.evict_at, changed.shed_at) == (0.5, 0.85, 0.95)


@pytest.mark.parametrize(
    "name",
    [
        "LLM_GUARD_DEMO_BACKEND",
        "LLM_GUARD_DEMO_MODEL",
        "LLM_GUARD_DEMO_RATE",
        "LLM_GUARD_TEST_ANYTHING",
        "LLM_GUARD_TEST_",
    ],
)
def test_from_env_allowlisted_variables_accepted(name: str) -> None:
    assert GuardConfig.from_env({name: "whatever", "LLM_GUARD_WARN_AT": "0.5"}).warn_at == 0.5


def test_from_env_unknown_override_rejected() -> None:
    message = env_error_of({}, warn=0.5)
    assert message.startswith("unknown setting warn; valid settings are: ")
    assert "warn_at" in message


# --- describe ---------------------------------------------------------------------------


def test_describe_is_json_safe_and_complete() -> None:
    config = GuardConfig.from_env(FULL_ENV)
    described = config.describe()
    assert list(described) == list(DEFAULTS)
    assert json.loads(json.dumps(described)) == described
    assert described["sources"] == ["cgroup", "host"]
    assert described["exempt_paths"] == ["/healthz", "/admin/ops", "/probe*"]
    assert described["memory_limit"] == 2 * GiB
    assert described["status_token"] == "***"
    assert "s3cret-token!" not in json.dumps(described)


def test_describe_without_token() -> None:
    described = GuardConfig().describe()
    assert described["status_token"] is None
    assert described["sources"] == ["process", "cgroup", "host"]


@pytest.mark.parametrize(("text", "hint"), [("512m", "write 512Mi for powers of 1024 or 512M"),
                                             ("2g", "write 2Gi for powers of 1024 or 2G")])
def test_parse_size_explains_ambiguous_lower_case_units(text: str, hint: str) -> None:
    with pytest.raises(ValueError, match="is ambiguous") as info:
        parse_size(text)
    assert hint in str(info.value)


def test_contract_quantities() -> None:
    """Issue 9's contract: 512Mi, 2Gi, 2G (= 2 * 10^9), 512MiB, 2GiB and byte counts."""
    limits = {text: GuardConfig.defaults(memory_limit=text).memory_limit
              for text in ("512Mi", "2Gi", "2G", "512MiB", "2GiB", "16777216")}
    assert limits == {"512Mi": 512 * MiB, "2Gi": 2 * GiB, "2G": 2 * 10**9, "512MiB": 512 * MiB,
                      "2GiB": 2 * GiB, "16777216": 16 * MiB}

