"""A middleware built with invalid settings refuses to start, and refuses to serve if started.

Starlette builds middleware lazily (on the first ASGI call), where a raised ConfigError made
uvicorn's ``lifespan="auto"`` start anyway and answer 500 to everything (issue 9 A4). The
middleware keeps the error instead: the lifespan startup fails with its message; without a
lifespan, every request gets a JSON 500 naming the setting, logged once.
"""

from __future__ import annotations

import logging
import os
import subprocess
from typing import Any

import httpx
import pytest
from asgiref.testing import ApplicationCommunicator

from llm_guard_sdk import GuardMiddleware
from llm_guard_sdk.errors import ConfigError
from tests.support.asgi import client_for, ws_scope
from tests.support.server import UvicornServer

pytestmark = pytest.mark.anyio


async def app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("the app must never be reached with invalid guard settings")


@pytest.fixture
def bad_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LLM_GUARD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LLM_GUARD_MEMORY_LIMIT", "abc")


@pytest.mark.usefixtures("bad_env")
async def test_lifespan_startup_fails_with_the_message(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, "llm_guard_sdk")
    middleware = GuardMiddleware(app)  # does not raise: Starlette would swallow it
    with pytest.raises(ConfigError, match="LLM_GUARD_MEMORY_LIMIT"):
        _ = middleware.guard
    comm = ApplicationCommunicator(middleware, {"type": "lifespan", "asgi": {"version": "3.0"}})
    await comm.send_input({"type": "lifespan.startup"})
    failed = await comm.receive_output(5)
    assert failed["type"] == "lifespan.startup.failed"
    assert "LLM_GUARD_MEMORY_LIMIT='abc' is invalid" in failed["message"]
    await comm.wait(5)
    (record,) = [r for r in caplog.records if r.name == "llm_guard_sdk"]
    assert "LLM_GUARD_MEMORY_LIMIT='abc'" in record.getMessage()


@pytest.mark.usefixtures("bad_env")
async def test_without_lifespan_every_request_is_a_clear_500(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, "llm_guard_sdk")
    middleware = GuardMiddleware(app)
    async with client_for(middleware) as client:
        for path in ("/", "/llm-guard/status"):
            response = await client.get(path)
            assert response.status_code == 500
            assert "LLM_GUARD_MEMORY_LIMIT='abc' is invalid" in response.json()["error"]
    assert len([r for r in caplog.records if r.name == "llm_guard_sdk"]) == 1  # logged once


@pytest.mark.usefixtures("bad_env")
async def test_websocket_handshake_is_refused() -> None:
    comm = ApplicationCommunicator(GuardMiddleware(app), ws_scope())
    await comm.send_input({"type": "websocket.connect"})
    closed = await comm.receive_output(5)
    assert closed == {"type": "websocket.close", "code": 1011,
                      "reason": "llm-guard configuration error"}


def test_uvicorn_without_lifespan_serves_the_error_not_the_app() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_GUARD_")}
    server = UvicornServer("tests.apps.refusal.starlette_add_middleware:app",
                           env={**env, "LLM_GUARD_MEMORY_LIMIT": "abc"},
                           args=["--lifespan", "off"], ready_path="/hello", name="refusal")
    server.start()
    try:
        for _ in range(2):
            response = httpx.get(server.url + "/hello", timeout=10, trust_env=False)
            assert response.status_code == 500
            assert "LLM_GUARD_MEMORY_LIMIT='abc' is invalid" in response.json()["error"]
    finally:
        server.stop()
    assert server.log_text().count("llm-guard configuration error") == 1


def test_default_uvicorn_refuses_to_start() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLM_GUARD_")}
    server = UvicornServer("tests.apps.refusal.starlette_add_middleware:app",
                           env={**env, "LLM_GUARD_MEMORY_LIMIT": "512"}, name="refusal")
    server.spawn()
    try:
        status = server.wait_exit(timeout=90)
    except subprocess.TimeoutExpired:
        server.stop()
        pytest.fail(f"uvicorn kept running; log:\n{server.log_tail()}")
    assert status != 0
    log = server.log_text()
    assert "LLM_GUARD_MEMORY_LIMIT='512' is invalid" in log and "at least 16Mi" in log
    assert "Application startup failed" in log
