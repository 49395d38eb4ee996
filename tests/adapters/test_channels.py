"""The Channels adapter in process, through ``channels.testing``'s communicators."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterable
from typing import Any

import pytest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.channels_app.settings")

import django

django.setup()

from channels.generic.http import AsyncHttpConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import path  # noqa: E402

from examples.channels_app.routing import http_router  # noqa: E402
from llm_guard_sdk import (  # noqa: E402
    CloseReason,
    Guard,
    GuardMiddleware,
    current_session,
)
from llm_guard_sdk.adapters.channels import (  # noqa: E402
    ChatRequest,
    GuardedHttpConsumer,
    GuardedWebsocketConsumer,
    guard_application,
)
from llm_guard_sdk.adapters.chat import ChatSettings  # noqa: E402
from llm_guard_sdk.adapters.openai_chunks import OpenAIChunks  # noqa: E402
from llm_guard_sdk.context import SCOPE_KEY  # noqa: E402
from tests.support import (  # noqa: E402
    Model,
    channels_communicators,
    make_guard,
    sse_events,
    until,
    ws_frames,
)

pytestmark = pytest.mark.anyio

HttpCommunicator, WebsocketCommunicator = channels_communicators()


class Chat(GuardedWebsocketConsumer):
    def __init__(self, *, model: Model, seen: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model
        self.seen = seen

    async def connect(self) -> None:
        await super().connect()
        self.seen.append((current_session(), self.scope.get(SCOPE_KEY), self.llm_session))

    async def generate(self, request: ChatRequest) -> AsyncIterable[str]:
        if request.message.get("max_tokens") == 0:
            raise ValueError("max_tokens must be >= 1")
        return self.model.stream(request.prompt, int(request.message.get("max_tokens", 3)))


class Stream(GuardedHttpConsumer):
    def __init__(self, *, model: Model, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model = model

    async def handle(self, body: bytes) -> None:
        prompt = self.scope["query_string"].decode() or "hi"
        framing = OpenAIChunks("tiny") if prompt.startswith("openai") else None
        await self.send_sse(self.model.stream(prompt.removeprefix("openai-") or "hi", 5),
                            ping=0.02, wait_first=prompt.endswith("reject"), framing=framing)


class Teapot(AsyncHttpConsumer):  # type: ignore[misc]
    async def handle(self, body: bytes) -> None:
        await self.send_response(418, b"short and stout", headers=[(b"x-app", b"1")])


class Broken(AsyncHttpConsumer):  # type: ignore[misc]
    async def handle(self, body: bytes) -> None:
        raise KeyError("consumer bug")


def build(g: Guard, model: Model, seen: list[Any] | None = None) -> GuardMiddleware:
    router = ProtocolTypeRouter({
        "http": http_router(model, [  # type: ignore[arg-type]
            path("stream", Stream.as_asgi(model=model)),
            path("teapot", Teapot.as_asgi()),
            path("broken", Broken.as_asgi()),
        ]),
        "websocket": URLRouter([
            path("ws/chat", Chat.as_asgi(model=model, seen=[] if seen is None else seen)),
        ]),
    })
    return guard_application(router, guard=g)


async def ws_connect(app: Any) -> Any:
    comm = WebsocketCommunicator(app, "/ws/chat")
    connected, _ = await comm.connect(timeout=5)
    assert connected
    return comm


def test_guard_wraps_once() -> None:
    g = make_guard()
    app = build(g, Model())
    assert isinstance(app, GuardMiddleware) and app.guard is g
    assert guard_application(app) is app


async def test_consumer_sees_the_session_in_context_and_scope() -> None:
    g, model, seen = make_guard(), Model(), []
    comm = await ws_connect(build(g, model, seen))
    await until(lambda: seen)
    (from_context, from_scope, bound), = seen
    assert from_context is from_scope is bound is next(iter(g.registry))
    await comm.disconnect()
    assert len(g.registry) == 0


async def test_websocket_chat_multi_turn_history_and_errors() -> None:
    g, model = make_guard(), Model()
    comm = await ws_connect(build(g, model))
    session = next(iter(g.registry))
    await comm.send_to(text_data=json.dumps({"prompt": "one", "max_tokens": 2}))
    assert await ws_frames(comm) == [{"type": "token", "text": "t0"},
                                     {"type": "token", "text": "t1"},
                                     {"type": "done", "turns": 1}]
    await comm.send_to(text_data="[1, 2]")
    assert "prompt" in (await ws_frames(comm))[0]["error"]
    await comm.send_to(text_data=json.dumps({"prompt": "x", "max_tokens": 0}))
    assert (await ws_frames(comm))[0]["error"] == "bad request: max_tokens must be >= 1"
    await comm.send_to(text_data=json.dumps({"prompt": "die", "max_tokens": 5}))
    frames = await ws_frames(comm)
    assert frames[-1] == {"type": "error", "error": "the engine is dead; retry later",
                          "status": 503}
    await comm.send_to(text_data=json.dumps({"prompt": "two", "max_tokens": 1}))
    assert (await ws_frames(comm))[-1] == {"type": "done", "turns": 2}
    assert [m["content"] for m in session.attachments[0]] == ["one", "t0t1", "two", "t0"]
    await comm.disconnect()
    assert len(g.registry) == 0 and model.open == 0


@pytest.mark.parametrize(("frame", "code"), [({"bytes_data": b"{}"}, 1003),
                                             ({"text_data": "y" * 100}, 1009)])
async def test_websocket_bad_frames_close_and_release_the_session(
        frame: dict[str, Any], code: int) -> None:
    g = make_guard(extensions=[ChatSettings.defaults(max_message_bytes=64)])
    comm = await ws_connect(build(g, Model()))
    await comm.send_to(**frame)
    closed = await comm.receive_output(5)
    assert closed["type"] == "websocket.close" and closed["code"] == code
    await comm.disconnect()
    assert len(g.registry) == 0


async def test_websocket_disconnect_mid_stream_closes_the_generator() -> None:
    g, model = make_guard(), Model()
    comm = await ws_connect(build(g, model))
    await comm.send_to(text_data=json.dumps({"prompt": "wait"}))
    await until(lambda: g.registry.streams_open)
    # receive() is still streaming, so Channels cannot dispatch this; the middleware sees it.
    await comm.send_input({"type": "websocket.disconnect", "code": 1001})
    await until(lambda: model.open == 0)
    await comm.wait(5)
    assert len(g.registry) == 0
    assert g.registry.counters.streams_disconnected_total == 1


async def test_websocket_eviction_closes_with_1013_and_reason() -> None:
    g, model = make_guard(), Model()
    comm = await ws_connect(build(g, model))
    await g.close_session(next(iter(g.registry)), CloseReason.EVICTED)  # idle: evicted first
    closed = await comm.receive_output(5)
    assert closed == {"type": "websocket.close", "code": 1013,
                      "reason": "llm-guard: evicted under memory pressure"}
    await comm.wait(5)  # the consumer stopped by itself
    assert len(g.registry) == 0


async def test_http_consumer_streams_sse_with_heartbeats() -> None:
    g, model = make_guard(), Model()
    comm = HttpCommunicator(build(g, model), "GET", "/stream?wait")
    task = asyncio.ensure_future(comm.get_response(timeout=5))
    await asyncio.sleep(0.15)
    model.release.set()
    response = await task
    await comm.wait(5)
    assert response["status"] == 200
    assert (b"content-type", b"text/event-stream; charset=utf-8") in response["headers"]
    events = sse_events(response["body"].decode())
    assert events.count(("comment", "ping")) >= 2
    assert [e for e in events if e[0] != "comment"][-1] == ("done", "{}")
    assert model.open == 0 and len(g.registry) == 0


async def test_http_consumer_notices_disconnect_while_handle_streams() -> None:
    """channels#1249: the dispatch loop is blocked in handle(); the middleware is not."""
    g, model = make_guard(), Model()
    comm = HttpCommunicator(build(g, model), "GET", "/stream?wait")
    await comm.send_input({"type": "http.request", "body": b""})
    assert (await comm.receive_output(5))["type"] == "http.response.start"
    await until(lambda: g.registry.streams_open)
    await comm.send_input({"type": "http.disconnect"})
    await until(lambda: model.open == 0)  # generator closed while handle() was running
    await comm.wait(5)
    assert len(g.registry) == 0
    assert g.registry.counters.streams_disconnected_total == 1


async def test_http_consumer_eviction_sends_evicted_then_done() -> None:
    g, model = make_guard(), Model()
    comm = HttpCommunicator(build(g, model), "GET", "/stream?wait")
    task = asyncio.ensure_future(comm.get_response(timeout=5))
    await until(lambda: g.registry.streams_open)
    await g.close_session(next(iter(g.registry)), CloseReason.EVICTED)
    response = await task
    await comm.wait(5)
    events = [e for e in sse_events(response["body"].decode()) if e[0] != "comment"]
    assert events == [("evicted", '{"reason":"evicted"}'), ("done", "{}")]
    assert model.open == 0


async def test_http_consumer_wait_first_turns_a_rejection_into_its_status() -> None:
    model = Model()
    comm = HttpCommunicator(build(make_guard(), model), "GET", "/stream?reject")
    response = await comm.get_response(timeout=5)
    await comm.wait(5)
    assert response["status"] == 400
    assert json.loads(response["body"]) == {"error": "prompt too long for this model"}
    assert model.open == 0


async def test_framework_responses_and_exceptions_pass_through() -> None:
    app = build(make_guard(), Model())
    teapot = HttpCommunicator(app, "GET", "/teapot")
    response = await teapot.get_response(timeout=5)
    await teapot.wait(5)
    assert (response["status"], response["body"]) == (418, b"short and stout")
    assert (b"x-app", b"1") in response["headers"]
    hello = HttpCommunicator(app, "GET", "/hello", headers=[(b"host", b"testserver")])
    response = await hello.get_response(timeout=5)
    await hello.wait(5)
    assert (response["status"], json.loads(response["body"])) == (200, {"hello": "world"})
    missing = HttpCommunicator(app, "GET", "/nowhere", headers=[(b"host", b"testserver")])
    response = await missing.get_response(timeout=5)
    await missing.wait(5)
    assert response["status"] == 404  # Django's own
    broken = HttpCommunicator(app, "GET", "/broken")
    await broken.send_input({"type": "http.request", "body": b""})
    with pytest.raises(KeyError, match="consumer bug"):  # not swallowed
        await broken.wait(5)


async def test_send_sse_speaks_openai_chunks() -> None:
    model = Model()
    comm = HttpCommunicator(build(make_guard(), model), "GET", "/stream?openai")
    response = await comm.get_response(timeout=10)
    events = [d for k, d in sse_events(response["body"].decode()) if k == "message"]
    assert events[-1] == "[DONE]" and len(events) == 7
    assert json.loads(events[0])["object"] == "chat.completion.chunk"
    assert model.open == 0


async def test_send_sse_openai_error_before_the_stream() -> None:
    comm = HttpCommunicator(build(make_guard(), Model()), "GET", "/stream?openai-reject")
    response = await comm.get_response(timeout=10)
    assert response["status"] == 400
    assert json.loads(response["body"])["error"]["type"] == "invalid_request_error"


async def test_consumer_heartbeat_pings_and_closes_a_silent_client() -> None:
    g = make_guard(extensions=[ChatSettings.defaults(ping_interval=0.1, ping_timeout=1.0)])
    model = Model()
    comm = await ws_connect(build(g, model))
    assert json.loads(await comm.receive_from(10)) == {"type": "ping"}
    await comm.send_to(text_data=json.dumps({"type": "pong"}))
    await comm.send_to(text_data=json.dumps({"prompt": "hi", "max_tokens": 1}))
    frames = []
    while not frames or frames[-1].get("type") != "done":
        frame = json.loads(await comm.receive_from(10))
        if frame == {"type": "ping"}:  # a slow machine: answer and go on
            await comm.send_to(text_data=json.dumps({"type": "pong"}))
            continue
        frames.append(frame)
    assert frames == [{"type": "token", "text": "t0"}, {"type": "done", "turns": 1}]
    while True:  # now stay silent: pinged, then closed as dead
        output = await comm.receive_output(10)
        if output["type"] == "websocket.close":
            break
        assert json.loads(output["text"]) == {"type": "ping"}
    assert output["code"] == 1011
    await until(lambda: len(g.registry) == 0, timeout=10)
    assert g.registry.counters.ping_timeout_total == 1 and model.open == 0
    await comm.wait(10)
