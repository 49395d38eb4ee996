"""The Litestar adapter in process: plugin, session dependency, SSE and WebSocket helpers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from litestar import Litestar, Response, WebSocket, get, websocket
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.middleware import DefineMiddleware
from litestar.params import FromQuery

from llm_guard_sdk import CloseReason, Guard, GuardConfig, GuardMiddleware, Session
from llm_guard_sdk.adapters.chat import ChatSettings
from llm_guard_sdk.adapters.litestar import (
    ChatRequest,
    GuardSessionDep,
    LLMGuardPlugin,
    sse_response,
    websocket_chat,
)
from tests.support import (
    Model,
    client_for,
    make_guard,
    sse_events,
    until,
    ws_connect,
    ws_frames,
    ws_send,
)

pytestmark = pytest.mark.anyio


def build(guard: Guard, model: Model, **sse: Any) -> Litestar:
    @get("/chat")
    async def chat(prompt: FromQuery[str], session: GuardSessionDep,
                   n: FromQuery[int] = 3) -> Response[Any]:
        session.attach({"prompt": len(prompt)})
        return sse_response(model.stream(prompt, n), **sse)

    @get("/whoami", sync_to_thread=False)
    def whoami(session: GuardSessionDep) -> dict[str, str]:
        return {"id": session.id}

    @get("/plain", sync_to_thread=False, status_code=201)
    def plain() -> Response[str]:
        return Response("plain body", status_code=201, headers={"x-app": "1"},
                        media_type="text/plain")

    @get("/teapot", sync_to_thread=False)
    def teapot() -> None:
        raise HTTPException(status_code=418, detail="I am a teapot")

    def answer(request: ChatRequest) -> AsyncIterator[str]:
        if request.message.get("max_tokens") == 0:
            raise ValueError("max_tokens must be >= 1")
        return model.stream(request.prompt, int(request.message.get("max_tokens", 3)))

    @websocket("/ws/chat")
    async def ws_chat(socket: WebSocket[Any, Any, Any], session: GuardSessionDep) -> None:
        assert session is not None  # the dependency works for sockets too
        await websocket_chat(socket, answer)

    return Litestar([chat, whoami, plain, teapot, ws_chat],
                    plugins=[LLMGuardPlugin(guard=guard)], logging_config=None)


# -- plugin ---------------------------------------------------------------------------------


def test_plugin_registers_middleware_dependency_route_state_and_hooks() -> None:
    guard = make_guard()
    plugin = LLMGuardPlugin(guard=guard)
    app = Litestar([], plugins=[plugin])
    guarded = [m for m in app.middleware
               if isinstance(m, DefineMiddleware) and m.middleware is GuardMiddleware]
    assert len(guarded) == 1 and guarded[0].kwargs["guard"] is guard
    assert "session" in app.dependencies
    assert app.state.llm_guard is guard
    assert guard.ensure_started in app.on_startup and guard.stop in app.on_shutdown
    assert any(path.startswith("/llm-guard") for path in app.route_handler_method_map)


def _config_of(plugin: LLMGuardPlugin) -> Any:
    from litestar.config.app import AppConfig

    config = AppConfig()
    plugin.on_app_init(config)
    return config


def test_plugin_applied_twice_changes_nothing() -> None:
    plugin = LLMGuardPlugin(guard=make_guard())
    config = _config_of(plugin)
    snapshot = (list(config.middleware), dict(config.dependencies), list(config.route_handlers),
                list(config.on_startup), list(config.on_shutdown))
    plugin.on_app_init(config)
    assert snapshot == (list(config.middleware), dict(config.dependencies),
                        list(config.route_handlers), list(config.on_startup),
                        list(config.on_shutdown))


def test_plugin_refuses_to_shadow_a_session_dependency() -> None:
    def other() -> str:
        return "mine"

    with pytest.raises(ValueError, match="dependency_key"):
        Litestar([], dependencies={"session": Provide(other, sync_to_thread=False)},
                 plugins=[LLMGuardPlugin(guard=make_guard())])
    app = Litestar([], dependencies={"session": Provide(other, sync_to_thread=False)},
                   plugins=[LLMGuardPlugin(guard=make_guard(), dependency_key="llm_session")])
    assert "llm_session" in app.dependencies


def test_plugin_rejects_a_guard_and_another_config() -> None:
    with pytest.raises(ValueError, match="either config or guard"):
        LLMGuardPlugin(GuardConfig.defaults(sources=("process",), retry_after=1),
                       guard=make_guard())


async def test_status_route_is_served_and_falls_back_without_the_middleware() -> None:
    guard = make_guard()
    async with client_for(build(guard, Model())) as client:
        response = await client.get("/llm-guard/status")
        assert response.status_code == 200 and response.json()["level"] == "normal"
        assert (await client.get("/llm-guard/nope")).status_code == 404

        def broken() -> None:
            raise RuntimeError("sampler cannot start")

        guard.ensure_started = broken  # type: ignore[method-assign]
        response = await client.get("/llm-guard/status")  # served by the plugin's route
        assert response.status_code == 200 and response.json()["level"] == "normal"
        assert guard.internal_errors_total >= 1


# -- session dependency and untouched framework behaviour -----------------------------------


async def test_session_dependency_is_the_request_session() -> None:
    async with client_for(build(make_guard(), Model())) as client:
        response = await client.get("/whoami")
    assert response.json()["id"] == response.headers["x-llm-guard-session"]


async def test_non_streaming_routes_and_framework_errors_pass_through() -> None:
    async with client_for(build(make_guard(), Model())) as client:
        plain = await client.get("/plain")
        assert (plain.status_code, plain.text, plain.headers["x-app"]) == (201, "plain body", "1")
        teapot = await client.get("/teapot")
        assert teapot.status_code == 418
        assert teapot.json() == {"status_code": 418, "detail": "I am a teapot"}
        missing = await client.get("/nowhere")
        assert missing.status_code == 404
        assert missing.json() == {"status_code": 404, "detail": "Not Found"}
        invalid = await client.get("/chat")  # Litestar's own validation error
        assert invalid.status_code == 400


# -- SSE ------------------------------------------------------------------------------------


async def test_sse_through_litestar_server_sent_event() -> None:
    guard, model = make_guard(), Model()
    async with client_for(build(guard, model)) as client:
        response = await client.get("/chat", params={"prompt": "hi"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert sse_events(response.text) == [("message", "t0"), ("message", "t1"),
                                         ("message", "t2"), ("done", "{}")]
    assert model.open == 0 and guard.registry.streams_open == 0


async def test_sse_heartbeat_comments_while_the_model_is_silent() -> None:
    model = Model()
    async with client_for(build(make_guard(), model, ping=0.02, event_type="token")) as client:
        request = asyncio.create_task(client.get("/chat", params={"prompt": "wait"}))
        await asyncio.sleep(0.2)
        model.release.set()
        response = await request
    events = sse_events(response.text)
    assert events.count(("comment", "ping")) >= 3
    assert [e for e in events if e[0] != "comment"] == [
        ("token", "t0"), ("token", "t1"), ("token", "t2"), ("done", "{}")]


async def test_sse_evicted_event_when_the_guard_closes_the_stream() -> None:
    guard, model = make_guard(), Model()
    async with client_for(build(guard, model)) as client:
        request = asyncio.create_task(client.get("/chat", params={"prompt": "wait"}))
        await until(lambda: guard.registry.streams_open)
        await guard.close_session(next(iter(guard.registry)), CloseReason.EVICTED)
        response = await request
    assert sse_events(response.text) == [("evicted", '{"reason":"evicted"}'), ("done", "{}")]
    assert model.open == 0


async def test_sse_backend_error_mid_stream_is_an_error_event() -> None:
    model = Model()
    async with client_for(build(make_guard(), model)) as client:
        response = await client.get("/chat", params={"prompt": "die", "n": 5})
    assert sse_events(response.text)[-1] == (
        "error", '{"error":"the engine is dead; retry later","status":503}')
    assert model.open == 0


async def test_sse_wait_first_turns_a_rejection_into_its_status() -> None:
    model = Model()
    async with client_for(build(make_guard(), model, wait_first=True)) as client:
        response = await client.get("/chat", params={"prompt": "reject"})
        ok = await client.get("/chat", params={"prompt": "fine"})
    assert response.status_code == 400
    assert response.json() == {"error": "prompt too long for this model"}
    assert ok.status_code == 200 and sse_events(ok.text)[-1] == ("done", "{}")
    assert model.open == 0


# -- WebSocket chat -------------------------------------------------------------------------


async def test_websocket_chat_multi_turn_history_and_errors() -> None:
    guard, model = make_guard(), Model()
    comm = await ws_connect(build(guard, model))
    session: Session = next(iter(guard.registry))
    await ws_send(comm, {"prompt": "one", "max_tokens": 2})
    assert (await ws_frames(comm))[-1] == {"type": "done", "turns": 1}
    await ws_send(comm, "{broken")
    assert (await ws_frames(comm))[0]["type"] == "error"
    await ws_send(comm, {"prompt": "x", "max_tokens": 0})
    assert (await ws_frames(comm))[0]["error"] == "bad request: max_tokens must be >= 1"
    await ws_send(comm, {"prompt": "two", "max_tokens": 1})
    assert (await ws_frames(comm))[-1] == {"type": "done", "turns": 2}
    assert [m["role"] for m in session.attachments[0]] == ["user", "assistant"] * 2
    await comm.send_input({"type": "websocket.disconnect", "code": 1000})
    await comm.wait(5)
    assert len(guard.registry) == 0 and model.open == 0


@pytest.mark.parametrize(("frame", "code"), [(b"{}", 1003), ("x" * 65, 1009)])
async def test_websocket_bad_frames_close_and_release_the_session(
        frame: str | bytes, code: int) -> None:
    guard = make_guard(extensions=[ChatSettings.defaults(max_message_bytes=64)])
    comm = await ws_connect(build(guard, Model()))
    await ws_send(comm, frame)
    closed = await comm.receive_output(5)
    assert closed["type"] == "websocket.close" and closed["code"] == code
    await comm.send_input({"type": "websocket.disconnect", "code": code})
    await comm.wait(5)
    assert len(guard.registry) == 0


async def test_websocket_eviction_closes_with_1013_and_reason() -> None:
    guard, model = make_guard(), Model()
    comm = await ws_connect(build(guard, model))
    await ws_send(comm, {"prompt": "wait"})
    await until(lambda: guard.registry.streams_open)
    await guard.close_session(next(iter(guard.registry)), CloseReason.EVICTED)
    closed = await comm.receive_output(5)
    assert closed == {"type": "websocket.close", "code": 1013,
                      "reason": "llm-guard: evicted under memory pressure"}
    await comm.wait(5)
    assert model.open == 0 and len(guard.registry) == 0


async def test_sse_openai_framing_with_ids_and_retry() -> None:
    from llm_guard_sdk.adapters.openai_chunks import OpenAIChunks

    guard, model = make_guard(), Model()
    app = build(guard, model, framing=OpenAIChunks("tiny", request_id="chatcmpl-1"),
                retry=2500, event_ids=True)
    async with client_for(app) as client:
        response = await client.get("/chat", params={"prompt": "hi", "n": 2})
    body = response.text.replace("\r\n", "\n")
    assert body.startswith("id: 1\ndata: {") and "retry: 2500" in body.split("\n\n")[0]
    assert body.count("retry:") == 1
    events = [data for kind, data in sse_events(body) if kind == "message"]
    assert events[-1] == "[DONE]"
    docs = [json.loads(d) for d in events[:-1]]
    assert [d["choices"][0]["delta"].get("content") for d in docs] == ["t0", "t1", None]
    assert docs[-1]["choices"][0]["finish_reason"] == "stop"
    assert {d["id"] for d in docs} == {"chatcmpl-1"} and model.open == 0
