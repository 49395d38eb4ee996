"""The WebSocket chat protocol, driven frame by frame without any framework."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk.adapters.chat import (
    WS_MESSAGE_TOO_BIG,
    WS_UNSUPPORTED_DATA,
    ChatProtocol,
    ChatRequest,
    Reject,
    max_message_bytes,
)
from tests.support import Model

pytestmark = pytest.mark.anyio


class Client:
    """Collects what the protocol sends, decoded."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    async def send_text(self, text: str) -> None:
        self.frames.append(json.loads(text))


def chat(model: Model, client: Client, *, max_bytes: int = 64) -> ChatProtocol:
    def handler(request: ChatRequest) -> AsyncIterable[str]:
        if request.message.get("max_tokens") == 0:
            raise ValueError("max_tokens must be >= 1")
        return model.stream(request.prompt, int(request.message.get("max_tokens", 2)))

    return ChatProtocol(handler, client.send_text, session=None, max_bytes=max_bytes)


def prompt(text: str, **extra: Any) -> str:
    return json.dumps({"prompt": text, **extra}, ensure_ascii=False)


async def test_a_prompt_streams_tokens_then_done_and_keeps_the_turn() -> None:
    model, client = Model(), Client()
    protocol = chat(model, client)
    assert await protocol.on_frame(prompt("one"), None) is None
    assert await protocol.on_frame(prompt("two", max_tokens=1), None) is None
    assert client.frames == [
        {"type": "token", "text": "t0"}, {"type": "token", "text": "t1"},
        {"type": "done", "turns": 1},
        {"type": "token", "text": "t0"}, {"type": "done", "turns": 2},
    ]
    assert protocol.history == [
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "t0t1"},
        {"role": "user", "content": "two"}, {"role": "assistant", "content": "t0"},
    ]
    assert model.open == 0


@pytest.mark.parametrize(("text", "data", "expected"), [
    (None, b"\x00", Reject(WS_UNSUPPORTED_DATA,
                           "binary frames are not supported; send JSON text")),
    (None, b"x" * 65, Reject(WS_MESSAGE_TOO_BIG, "message too big")),
    (prompt("é" * 30), None, Reject(WS_MESSAGE_TOO_BIG, "message too big")),  # 44 chars, 74 B
])
async def test_protocol_violations_close_the_socket(text: str | None, data: bytes | None,
                                                    expected: Reject) -> None:
    client = Client()
    assert await chat(Model(), client).on_frame(text, data) == expected
    assert client.frames == []


async def test_a_multibyte_prompt_within_the_limit_is_answered() -> None:
    client = Client()
    assert await chat(Model(), client).on_frame(prompt("é" * 10), None) is None  # 34 bytes
    assert client.frames[-1] == {"type": "done", "turns": 1}


@pytest.mark.parametrize(("frame", "error"), [
    ("{not json", "bad request: Expecting property name"),
    (json.dumps({"text": "no prompt"}), 'bad request: expected a JSON object with a string'),
    (prompt("x", max_tokens=0), "bad request: max_tokens must be >= 1"),
])
async def test_bad_requests_get_an_error_frame_and_leave_no_history(frame: str,
                                                                    error: str) -> None:
    client = Client()
    protocol = chat(Model(), client)
    assert await protocol.on_frame(frame, None) is None
    (sent,) = client.frames
    assert sent["type"] == "error" and sent["error"].startswith(error)
    assert protocol.history == [] and protocol.turns == 0


async def test_a_backend_failure_is_reported_with_its_status_and_forgotten() -> None:
    model, client = Model(), Client()
    protocol = chat(model, client)
    await protocol.on_frame(prompt("die", max_tokens=5), None)
    assert client.frames[-1] == {"type": "error", "error": "the engine is dead; retry later",
                                 "status": 503}
    assert protocol.history == [] and model.open == 0


def test_message_limit_prefers_the_override_then_the_config_default() -> None:
    assert max_message_bytes(123) == 123
    assert max_message_bytes() == 1024 * 1024  # no guard serving: GuardConfig's default


async def test_a_model_raising_mid_turn_gets_an_error_frame_and_the_chat_goes_on() -> None:
    calls = 0

    async def failing() -> AsyncIterator[str]:
        yield "t0"
        raise RuntimeError("secret detail")

    def handler(request: ChatRequest) -> AsyncIterable[str]:
        nonlocal calls
        calls += 1
        return failing() if calls == 1 else Model().stream(request.prompt, 1)

    client = Client()
    protocol = ChatProtocol(handler, client.send_text, session=None, max_bytes=64)
    await protocol.on_frame(prompt("a"), None)
    assert client.frames[-1] == {"type": "error", "error": "the model failed while streaming",
                                 "status": 500}
    assert protocol.history == []
    await protocol.on_frame(prompt("b"), None)
    assert client.frames[-1]["type"] == "done"


async def test_a_failing_send_is_not_reported_as_a_model_failure() -> None:
    """A gone client (OSError from send) ends the turn as before: no error frame, raised."""

    async def send_text(text: str) -> None:
        raise OSError("client gone")

    protocol = ChatProtocol(lambda request: Model().stream(request.prompt, 2), send_text,
                            session=None, max_bytes=64)
    with pytest.raises(OSError, match="client gone"):
        await protocol.on_frame(prompt("a"), None)
