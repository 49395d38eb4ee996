"""Invalid settings stop the server from starting, whichever one-line setup the app uses.

Issue 9 A4: with ``app.add_middleware(GuardMiddleware)`` and ``LLM_GUARD_MEMORY_LIMIT=abc``,
uvicorn's default ``lifespan="auto"`` logged "lifespan unsupported", started, and answered 500
to every request. Each setup is served by real uvicorn with its default settings: the process
must exit non-zero and its log must name the setting.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.server import UvicornServer

APPS = {
    "add_middleware": "tests.apps.refusal.starlette_add_middleware:app",
    "install": "tests.apps.refusal.fastapi_install:app",
    "litestar_plugin": "tests.apps.refusal.litestar_plugin:app",
    "channels_wrapper": "tests.apps.refusal.channels_wrapper:application",
}


def bad_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_GUARD_")}
    return {**env, "LLM_GUARD_MEMORY_LIMIT": "abc", **extra}


@pytest.mark.parametrize("app", list(APPS.values()), ids=list(APPS))
def test_server_refuses_to_start_with_invalid_settings(app: str) -> None:
    server = UvicornServer(app, env=bad_env(), name="refusal")
    server.spawn()
    try:
        status = server.wait_exit(timeout=90)
    except subprocess.TimeoutExpired:
        server.stop()
        pytest.fail(f"uvicorn kept running with invalid settings; log:\n{server.log_tail()}")
    log = server.log_text()
    assert status != 0, log
    assert "LLM_GUARD_MEMORY_LIMIT='abc' is invalid" in log, log


def test_a_setting_of_an_extension_is_checked_at_start_up_too() -> None:
    env = bad_env(LLM_GUARD_MEMORY_LIMIT="", LLM_GUARD_MAX_MESSAGE_BYTES="lots")
    server = UvicornServer(APPS["install"], env=env, name="refusal")
    server.spawn()
    try:
        status = server.wait_exit(timeout=90)
    except subprocess.TimeoutExpired:
        server.stop()
        pytest.fail(f"uvicorn kept running with invalid settings; log:\n{server.log_tail()}")
    assert status != 0
    assert "LLM_GUARD_MAX_MESSAGE_BYTES='lots' is invalid" in server.log_text()
