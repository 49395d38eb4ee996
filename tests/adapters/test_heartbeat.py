"""The chat's application-level heartbeat, and the server heartbeat check at start-up."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import FastAPI, WebSocket

from llm_guard_sdk.adapters.chat import ChatSettings
from llm_guard_sdk.adapters.fastapi import install, websocket_chat
from llm_guard_sdk.adapters.heartbeat import ChatHeartbeat
from llm_guard_sdk.asgi.heartbeat import ServerHeartbeatCheck, heartbeat_warning
from tests.support import Model, make_guard, ws_connect, ws_send

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_heartbeat_pings_after_silence_and_declares_dead_after_timeout() -> None:
    clock = Clock()
    beat = ChatHeartbeat(10.0, 5.0, clock=clock)
    assert beat.wait() == 10.0 and beat.due() is None
    clock.now += 10
    assert beat.due() == "ping"
    beat.pinged()
    assert beat.wait() == 5.0 and beat.due() is None
    clock.now += 4
    beat.seen()  # the pong
    assert beat.ping_sent is None and beat.wait() == 10.0
    clock.now += 10
    beat.pinged()
    clock.now += 5
    assert beat.due() == "dead"
    beat.busy = True  # an answer is streaming: never pinged, never dead
    assert beat.due() is None and beat.wait() is None
    assert ChatHeartbeat(None, 5.0).wait() is None


def test_heartbeat_warning_only_when_not_safely_below_idle_timeout() -> None:
    assert heartbeat_warning(20, 20, 300, source="x") is None
    assert heartbeat_warning(None, 20, 10, source="x") is None
    warning = heartbeat_warning(100, 60, 300, source="the chat ping")
    assert warning is not None and "not safely below" in warning and "150 s" in warning


def test_chat_settings_read_the_environment_and_warn_at_setup(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("LLM_GUARD_CHAT_PING_INTERVAL", "200")
    monkeypatch.setenv("LLM_GUARD_CHAT_PING_TIMEOUT", "30")
    settings = ChatSettings()
    assert (settings.ping_interval, settings.ping_timeout) == (200.0, 30.0)
    with caplog.at_level(logging.WARNING, "llm_guard_sdk"):
        make_guard(extensions=[settings])
    assert "the chat ping heartbeat (200 s + 30 s to answer) is not safely below" in caplog.text
    monkeypatch.setenv("LLM_GUARD_CHAT_PING_INTERVAL", "0")
    assert ChatSettings().ping_interval is None
    monkeypatch.setenv("LLM_GUARD_CHAT_PING_TIMEOUT", "-1")
    with pytest.raises(ValueError, match="LLM_GUARD_CHAT_PING_TIMEOUT"):
        ChatSettings()


def test_server_heartbeat_is_read_from_uvicorns_receive(
        caplog: pytest.LogCaptureFixture) -> None:
    class Protocol:
        def __init__(self, interval: float | None, timeout: float | None) -> None:
            self.config = SimpleNamespace(ws_ping_interval=interval, ws_ping_timeout=timeout)

        async def receive(self) -> dict[str, Any]:
            return {}

    check = ServerHeartbeatCheck()
    check.check(lambda: None, 300)  # a server that shows nothing: checked later, if ever
    assert not check.done
    with caplog.at_level(logging.INFO, "llm_guard_sdk"):
        check.check(Protocol(200, 100).receive, 300)
        check.check(Protocol(None, None).receive, 300)  # once only
    assert check.done and check.server == (200, 100)
    assert "the server's WebSocket heartbeat (200 s + 100 s to answer)" in caplog.text
    assert "ws_ping_interval off" not in caplog.text


async def test_a_client_that_answers_pings_stays_and_one_that_does_not_is_closed() -> None:
    model = Model()
    guard = make_guard(extensions=[ChatSettings.defaults(ping_interval=0.2, ping_timeout=1.0)])
    app = FastAPI()
    install(app, guard=guard)

    @app.websocket("/ws/chat")
    async def chat(websocket: WebSocket) -> None:
        await websocket_chat(websocket, lambda request: model.stream(request.prompt, 2))

    comm = await ws_connect(app)

    async def next_frame(*, answer_pings: bool = False) -> dict[str, Any]:
        while True:
            message = await comm.receive_output(10)
            if message["type"] == "websocket.close":
                return {"closed": message["code"]}
            frame: dict[str, Any] = json.loads(message["text"])
            if not (answer_pings and frame == {"type": "ping"}):
                return frame
            await ws_send(comm, {"type": "pong"})  # alive: however slow this machine is

    assert await next_frame() == {"type": "ping"}
    await ws_send(comm, {"type": "pong"})
    await ws_send(comm, {"prompt": "hi"})  # a turn between pings still works
    assert [await next_frame(answer_pings=True) for _ in range(3)] == [
        {"type": "token", "text": "t0"}, {"type": "token", "text": "t1"},
        {"type": "done", "turns": 1}]
    await ws_send(comm, {"type": "ping"})
    assert await next_frame(answer_pings=True) == {"type": "pong"}
    assert guard.registry.counters.ping_timeout_total == 0
    assert await next_frame() == {"type": "ping"}  # now stay silent
    assert await next_frame() == {"closed": 1011}
    await comm.wait(10)
    assert guard.registry.counters.ping_timeout_total == 1
    assert guard.status()["sessions"]["ping_timeout_total"] == 1
    assert len(guard.registry) == 0 and model.open == 0
