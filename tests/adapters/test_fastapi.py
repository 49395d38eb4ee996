"""The FastAPI adapter in process: install, session dependency, SSE and WebSocket helpers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI, HTTPException, WebSocket
from fastapi.responses import PlainTextResponse

from llm_guard_sdk import CloseReason, Guard, GuardConfig, GuardMiddleware, Session
from llm_guard_sdk.adapters.chat import ChatSettings
from llm_guard_sdk.adapters.fastapi import (
    ChatRequest,
    GuardSessionDep,
    OptionalGuardSessionDep,
    install,
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


def build(guard: Guard, model: Model, **sse: Any) -> FastAPI:
    app = FastAPI()
    install(app, guard=guard)

    @app.get("/chat")
    async def chat(prompt: str, session: GuardSessionDep, n: int = 3) -> Any:
        session.attach({"prompt": len(prompt)})
        return sse_response(model.stream(prompt, n), **sse)

    @app.get("/whoami")
    async def whoami(session: GuardSessionDep) -> dict[str, str]:
        return {"id": session.id}

    @app.get("/test/optional")
    async def optional(session: OptionalGuardSessionDep) -> dict[str, bool]:
        return {"session": session is not None}

    @app.get("/plain")
    async def plain() -> PlainTextResponse:
        return PlainTextResponse("plain body", status_code=201, headers={"x-app": "1"})

    @app.get("/teapot")
    async def teapot() -> None:
        raise HTTPException(status_code=418, detail="I am a teapot")

    @app.get("/boom")
    async def boom() -> None:
        raise KeyError("app bug")

    def answer(request: ChatRequest) -> AsyncIterator[str]:
        if request.message.get("max_tokens") == 0:
            raise ValueError("max_tokens must be >= 1")
        return model.stream(request.prompt, int(request.message.get("max_tokens", 3)))

    @app.websocket("/ws/chat")
    async def ws_chat(websocket: WebSocket, session: GuardSessionDep) -> None:
        assert session is not None  # the dependency works for sockets too
        await websocket_chat(websocket, answer)

    return app


# -- install --------------------------------------------------------------------------------


def test_install_is_idempotent_and_exposes_the_guard() -> None:
    app = FastAPI()
    guard = install(app, GuardConfig.defaults(sources=("process",)))
    assert install(app) is guard
    assert install(app, guard=guard) is guard
    assert app.state.llm_guard is guard
    assert [m.cls for m in app.user_middleware].count(GuardMiddleware) == 1
    with pytest.raises(ValueError, match="already installed"):
        install(app, guard=Guard(GuardConfig.defaults(sources=("process",))))
    with pytest.raises(ValueError, match="already installed"):
        install(app, GuardConfig.defaults(sources=("process",), retry_after=9))


def test_install_adopts_a_middleware_added_by_hand() -> None:
    app = FastAPI()
    config = GuardConfig.defaults(sources=("process",), retry_after=7)
    app.add_middleware(GuardMiddleware, config=config)
    guard = install(app)
    assert guard.config.retry_after == 7
    assert [m.cls for m in app.user_middleware].count(GuardMiddleware) == 1


def test_install_rejects_a_guard_and_another_config() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    with pytest.raises(ValueError, match="either config or guard"):
        install(FastAPI(), GuardConfig.defaults(sources=("process",), retry_after=1), guard=guard)


async def test_status_routes_come_from_the_middleware_once() -> None:
    app = build(make_guard(), Model())
    async with client_for(app) as client:
        response = await client.get("/llm-guard/status")
        assert response.status_code == 200 and response.json()["level"] == "normal"
    assert not [r for r in app.routes if getattr(r, "path", "").startswith("/llm-guard")]


# -- session dependency ---------------------------------------------------------------------


async def test_session_dependency_is_the_request_session() -> None:
    guard = make_guard(exempt_paths=("/test",))
    async with client_for(build(guard, Model())) as client:
        response = await client.get("/whoami")
        assert response.json()["id"] == response.headers["x-llm-guard-session"]
        assert (await client.get("/test/optional")).json() == {"session": False}


async def test_missing_middleware_is_a_loud_error_not_a_none() -> None:
    app = FastAPI()

    @app.get("/whoami")
    async def whoami(session: GuardSessionDep) -> dict[str, str]:
        return {"id": session.id}

    async with client_for(app) as client:
        with pytest.raises(RuntimeError, match="no llm-guard session"):
            await client.get("/whoami")


# -- framework behaviour untouched ----------------------------------------------------------


async def test_non_streaming_routes_and_framework_errors_pass_through() -> None:
    async with client_for(build(make_guard(), Model())) as client:
        plain = await client.get("/plain")
        assert (plain.status_code, plain.text, plain.headers["x-app"]) == (201, "plain body", "1")
        teapot = await client.get("/teapot")
        assert teapot.status_code == 418 and teapot.json() == {"detail": "I am a teapot"}
        missing = await client.get("/nowhere")
        assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}
        invalid = await client.get("/chat")  # FastAPI's own validation error
        assert invalid.status_code == 422
        with pytest.raises(KeyError, match="app bug"):  # not swallowed
            await client.get("/boom")


# -- SSE ------------------------------------------------------------------------------------


async def test_sse_response_streams_then_done() -> None:
    guard, model = make_guard(), Model()
    async with client_for(build(guard, model)) as client:
        response = await client.get("/chat", params={"prompt": "hi"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    assert sse_events(response.text) == [("message", "t0"), ("message", "t1"),
                                         ("message", "t2"), ("done", "{}")]
    assert model.open == 0 and guard.registry.streams_open == 0


async def test_sse_heartbeat_comments_while_the_model_is_silent() -> None:
    guard, model = make_guard(), Model()
    app = build(guard, model, ping=0.02, event_type="token")
    async with client_for(app) as client:
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
        session = next(iter(guard.registry))
        await guard.close_session(session, CloseReason.EVICTED)
        response = await request
    assert sse_events(response.text) == [("evicted", '{"reason":"evicted"}'), ("done", "{}")]
    assert model.open == 0


async def test_sse_backend_error_mid_stream_is_an_error_event() -> None:
    model = Model()
    async with client_for(build(make_guard(), model)) as client:
        response = await client.get("/chat", params={"prompt": "die", "n": 5})
    assert sse_events(response.text) == [
        ("message", "t0"), ("message", "t1"),
        ("error", '{"error":"the engine is dead; retry later","status":503}')]
    assert model.open == 0


@pytest.mark.parametrize("wait_first", [True, False])
async def test_sse_backend_rejection_before_first_token(wait_first: bool) -> None:
    model = Model()
    async with client_for(build(make_guard(), model, wait_first=wait_first)) as client:
        response = await client.get("/chat", params={"prompt": "reject"})
    if wait_first:  # a real HTTP status before any header was sent
        assert response.status_code == 400
        assert response.json() == {"error": "prompt too long for this model"}
    else:
        assert response.status_code == 200
        assert sse_events(response.text) == [
            ("error", '{"error":"prompt too long for this model","status":400}')]
    assert model.open == 0


async def test_sse_non_text_items_are_json() -> None:
    app = FastAPI()
    install(app, guard=make_guard())

    async def items() -> AsyncIterator[Any]:
        yield {"a": 1}
        yield b"raw"
        yield "two\nlines"

    @app.get("/items")
    async def route() -> Any:
        return sse_response(items(), ping=None)

    async with client_for(app) as client:
        response = await client.get("/items")
    assert sse_events(response.text) == [("message", '{"a":1}'), ("message", "raw"),
                                         ("message", "two\nlines"), ("done", "{}")]


def test_sse_rejects_a_negative_ping() -> None:
    async def empty() -> AsyncIterator[str]:
        yield ""

    with pytest.raises(ValueError, match="ping"):
        sse_response(empty(), ping=-1)


# -- WebSocket chat -------------------------------------------------------------------------


async def test_websocket_chat_multi_turn_history_and_errors() -> None:
    guard, model = make_guard(), Model()
    comm = await ws_connect(build(guard, model))
    session: Session = next(iter(guard.registry))
    await ws_send(comm, {"prompt": "one", "max_tokens": 2})
    assert await ws_frames(comm) == [{"type": "token", "text": "t0"},
                                     {"type": "token", "text": "t1"},
                                     {"type": "done", "turns": 1}]
    await ws_send(comm, "not json")
    assert (await ws_frames(comm))[0]["type"] == "error"
    await ws_send(comm, {"no": "prompt"})
    assert "prompt" in (await ws_frames(comm))[0]["error"]
    await ws_send(comm, {"prompt": "bad", "max_tokens": 0})
    assert (await ws_frames(comm))[0] == {"type": "error",
                                          "error": "bad request: max_tokens must be >= 1"}
    await ws_send(comm, {"prompt": "reject"})
    assert (await ws_frames(comm))[0] == {"type": "error", "status": 400,
                                          "error": "prompt too long for this model"}
    await ws_send(comm, {"prompt": "two", "max_tokens": 1})
    assert (await ws_frames(comm))[-1] == {"type": "done", "turns": 2}
    history = session.attachments[0]
    assert history == [{"role": "user", "content": "one"},
                       {"role": "assistant", "content": "t0t1"},
                       {"role": "user", "content": "two"},
                       {"role": "assistant", "content": "t0"}]
    await comm.send_input({"type": "websocket.disconnect", "code": 1000})
    await comm.wait(5)
    assert len(guard.registry) == 0 and model.open == 0


@pytest.mark.parametrize(("frame", "code"), [(b"{}", 1003), ("x" * 65, 1009),
                                             ('{"prompt": "' + "é" * 30 + '"}', 1009)])
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


async def test_websocket_disconnect_mid_stream_closes_the_generator() -> None:
    guard, model = make_guard(), Model()
    comm = await ws_connect(build(guard, model))
    await ws_send(comm, {"prompt": "wait"})
    await until(lambda: guard.registry.streams_open)
    await comm.send_input({"type": "websocket.disconnect", "code": 1001})
    await comm.wait(5)
    assert model.open == 0 and len(guard.registry) == 0
    assert guard.registry.counters.streams_disconnected_total == 1


async def test_websocket_eviction_closes_with_1013_and_reason() -> None:
    guard, model = make_guard(), Model()
    comm = await ws_connect(build(guard, model))
    await ws_send(comm, {"prompt": "wait"})
    await until(lambda: guard.registry.streams_open)
    await guard.close_session(next(iter(guard.registry)), CloseReason.EVICTED)
    closed = await comm.receive_output(5)
    assert closed == {"type": "websocket.close", "code": 1013,
                      "reason": "llm-guard: evicted under memory pressure"}
    await comm.wait(5)  # the helper returned by itself
    assert model.open == 0 and len(guard.registry) == 0


async def test_websocket_chunk_timeout_ends_the_turn_and_keeps_the_socket() -> None:
    guard, model = make_guard(chunk_timeout=0.1, sample_interval=0.02), Model()
    comm = await ws_connect(build(guard, model))
    await ws_send(comm, {"prompt": "wait"})
    assert await ws_frames(comm) == [{"type": "evicted", "reason": "timeout"},
                                     {"type": "done", "turns": 1}]
    await ws_send(comm, {"prompt": "again", "max_tokens": 1})
    assert (await ws_frames(comm))[-1] == {"type": "done", "turns": 2}
    await comm.send_input({"type": "websocket.disconnect", "code": 1000})
    await comm.wait(5)
    await guard.stop()
    assert model.open == 0 and len(guard.registry) == 0
