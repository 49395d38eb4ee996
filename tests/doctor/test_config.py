"""Provenance of settings (default / environment / code), the config report and its route."""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

from llm_guard_sdk import cli
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.config_report import config_report, running_settings
from llm_guard_sdk.doctor import local_report
from llm_guard_sdk.leaks.settings import LeakSettings
from tests.support import make_guard, run_cli

TOKEN = "secret-token-4242"


def test_provenance_records_where_each_value_came_from() -> None:
    config = GuardConfig.from_env({"LLM_GUARD_WARN_AT": "0.6", "LLM_GUARD_IDLE_TIMEOUT": "90"},
                                  idle_timeout=45.0)
    origins = config.provenance()
    assert origins["warn_at"] == "environment"
    assert origins["idle_timeout"] == "code"  # a keyword argument wins over the variable
    assert origins["evict_at"] == "default"
    assert set(origins) == {f.name for f in dataclasses.fields(config)}


def test_provenance_of_defaults_and_of_copies() -> None:
    config = GuardConfig.defaults(max_sessions=5)
    assert config.provenance()["max_sessions"] == "code"
    assert config.provenance()["warn_at"] == "default"
    # Every field given (dataclasses.replace, unpickling): built from values in code.
    assert dataclasses.replace(config).provenance()["warn_at"] == "code"
    assert pickle.loads(pickle.dumps(config)).provenance()["warn_at"] == "code"
    assert dataclasses.replace(config) == config  # provenance is not compared
    # Settings.replace keeps the origins of what it does not change.
    copy = config.replace(warn_at=0.7, origin="environment")
    assert copy.warn_at == 0.7 and copy.provenance()["warn_at"] == "environment"
    assert copy.provenance()["max_sessions"] == "code"
    assert copy.provenance()["evict_at"] == "default"


def test_switched_on_adaptive_timeouts_keep_the_switch_origin() -> None:
    from llm_guard_sdk.actions.adaptive import AdaptiveTimeouts
    from tests.support import make_guard

    guard = make_guard(adaptive_timeouts=True)
    timeouts = guard.extension("timeouts")
    assert isinstance(timeouts, AdaptiveTimeouts) and timeouts.settings.enabled
    assert timeouts.settings.provenance()["enabled"] == "code"
    assert timeouts.settings.provenance()["p99_factor"] == "default"


def test_report_hides_secrets_and_names_variables() -> None:
    config = GuardConfig.from_env({"LLM_GUARD_STATUS_TOKEN": TOKEN})
    doc = config_report(config, limit_bytes=2**30, limit_source="cgroup",
                        extensions={"leaks": LeakSettings.defaults()}, where="test")
    assert doc["memory_limit"] == {"bytes": 2**30, "source": "cgroup"}
    token = doc["settings"]["status_token"]
    assert token == {"value": "***", "origin": "environment", "env": "LLM_GUARD_STATUS_TOKEN"}
    assert TOKEN not in json.dumps(doc)
    assert doc["extensions"]["leaks"]["leak_grace"]["origin"] == "default"
    assert doc["settings"]["snapshot_ring_size"]["env"] == "LLM_GUARD_SNAPSHOT_RING"


def test_the_config_route_reports_the_running_guard() -> None:
    guard = make_guard(idle_timeout=42.0, extensions=["leaks"])
    answer = guard.control_routes["/config"]({})
    assert isinstance(answer, tuple)
    status, doc = answer[0], answer[1]
    assert status == 200 and doc["where"] == "running guard"
    assert doc["settings"]["idle_timeout"] == {"value": 42.0, "origin": "code",
                                               "env": "LLM_GUARD_IDLE_TIMEOUT"}
    assert doc["settings"]["warn_at"]["origin"] == "default"
    assert doc["memory_limit"]["bytes"] == guard.limit_bytes
    assert "leaks" in doc["extensions"]
    assert guard.control_routes["/config"].access == "status"
    assert set(running_settings(guard.extensions)) == {"leaks"}


def test_local_report_reads_the_environment() -> None:
    doc = local_report({"LLM_GUARD_IDLE_TIMEOUT": "120", "LLM_GUARD_BREAKER_FAILURES": "7",
                        "LLM_GUARD_STATUS_TOKEN": TOKEN})
    assert doc["where"] == "local environment"
    assert doc["settings"]["idle_timeout"]["origin"] == "environment"
    assert doc["settings"]["max_sessions"]["origin"] == "default"
    assert doc["extensions"]["breakers"]["failures"] == {
        "value": 7, "origin": "environment", "env": "LLM_GUARD_BREAKER_FAILURES"}
    assert doc["memory_limit"]["source"] in {"cgroup", "host"}
    assert TOKEN not in json.dumps(doc)


def test_config_command_prints_origins_and_hides_the_token() -> None:
    env = {"LLM_GUARD_IDLE_TIMEOUT": "120", "LLM_GUARD_STATUS_TOKEN": TOKEN,
           "LLM_GUARD_MEMORY_LIMIT": "3Gi"}
    result = run_cli("config", env=env)
    assert result.returncode == cli.EXIT_OK, result.stderr
    assert TOKEN not in result.stdout
    lines = {line.split()[0]: line.split() for line in result.stdout.splitlines()
             if line.startswith("  ")}
    assert lines["idle_timeout"][1:3] == ["120.0", "environment"]
    assert lines["status_token"][1:3] == ["***", "environment"]
    assert lines["warn_at"][1:3] == ["0.75", "default"]
    assert "memory limit   3.0 GiB from configured" in result.stdout
    as_json = run_cli("config", "--json", env=env)
    assert json.loads(as_json.stdout)["memory_limit"]["source"] == "configured"


@pytest.mark.parametrize(("variable", "value"), [("LLM_GUARD_WARN_AT", "O.7"),
                                                 ("LLM_GUARD_BREAKER_FAILURES", "many")])
def test_invalid_environment_exits_2_naming_the_setting(variable: str, value: str) -> None:
    result = run_cli("config", env={variable: value})
    assert result.returncode == 2
    assert result.stdout == ""
    assert variable in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_config_route_reports_an_extensions_settings_from_code() -> None:
    from llm_guard_sdk.leaks import LeakExtension

    guard = make_guard(extensions=[LeakExtension(LeakSettings.defaults(leak_grace=2.0))])
    answer = guard.control_routes["/config"]({})
    assert isinstance(answer, tuple)
    leaks = answer[1]["extensions"]["leaks"]
    assert leaks["leak_grace"] == {"value": 2.0, "origin": "code", "env": "LLM_GUARD_LEAK_GRACE"}
    assert leaks["log_content"]["origin"] == "default"
