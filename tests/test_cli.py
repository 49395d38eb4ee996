"""``llm-guard``: version, the token from the environment, and exit codes (real uvicorn)."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator

import httpx
import pytest

import llm_guard_sdk
from llm_guard_sdk import cli
from tests.support import run_cli, uvicorn_server

TOKEN = "cli-env-token-123"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The pressure app (level set by the test) behind a status token."""
    env = {"LLM_GUARD_STATUS_TOKEN": TOKEN, "LLM_GUARD_SAMPLE_INTERVAL": "0.05"}
    with uvicorn_server("tests.support.pressure_app:app", env, ready_path="/") as base:
        yield base


def set_pressure(base: str, used: int) -> str:
    level: str = httpx.post(f"{base}/test/pressure", params={"used": used}).json()["level"]
    return level


def test_version_matches_the_installed_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"llm-guard {llm_guard_sdk.__version__}\n"
    assert llm_guard_sdk.__version__ == importlib.metadata.version("llm-guard-sdk")


def test_help_documents_the_exit_codes() -> None:
    text = cli.build_parser().format_help()
    for code in (0, 1, 2, 3):
        assert f"\n  {code:<4} " in text
    assert "LLM_GUARD_STATUS_TOKEN" in text


def test_token_is_read_from_the_environment(server: str) -> None:
    assert set_pressure(server, 0) == "normal"
    without = run_cli("--url", server, "status")
    assert without.returncode == cli.EXIT_SERVER_ERROR and "HTTP 401" in without.stderr
    result = run_cli("--url", server, "status", "--json", env={"LLM_GUARD_STATUS_TOKEN": TOKEN})
    assert result.returncode == cli.EXIT_OK, result.stderr
    assert json.loads(result.stdout)["level"] == "normal"


def test_token_flag_wins_over_the_environment(server: str) -> None:
    wrong_env = {"LLM_GUARD_STATUS_TOKEN": "not-the-token-1"}
    assert run_cli("--url", server, "status", env=wrong_env).returncode == 1
    result = run_cli("--url", server, "status", "--token", TOKEN, env=wrong_env)
    assert result.returncode == cli.EXIT_OK, result.stderr


def test_status_exits_3_while_shedding_and_0_after(server: str) -> None:
    env = {"LLM_GUARD_STATUS_TOKEN": TOKEN}
    try:
        assert set_pressure(server, 950) == "shed"
        assert httpx.get(f"{server}/").status_code == 503  # really shedding
        shedding = run_cli("--url", server, "status", env=env)
        assert shedding.returncode == cli.EXIT_SHEDDING, shedding.stderr
        assert shedding.stdout.startswith("level      shed")
        as_json = run_cli("--url", server, "status", "--json", env=env)
        assert as_json.returncode == cli.EXIT_SHEDDING
        assert json.loads(as_json.stdout)["level"] == "shed"
    finally:
        assert set_pressure(server, 0) == "normal"
    assert run_cli("--url", server, "status", env=env).returncode == cli.EXIT_OK
