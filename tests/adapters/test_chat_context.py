"""The chat helpers' history budget: trimming before each turn, client histories, status."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import pytest
from fastapi import FastAPI, WebSocket

from llm_guard_sdk import GuardConfig
from llm_guard_sdk.adapters.chat import (
    WS_UNSUPPORTED_DATA,
    ChatProtocol,
    ChatRequest,
    ChatSettings,
    history_trimmer,
)
from llm_guard_sdk.adapters.chat_context import ContextBudget, HistoryTrimmer, close_reason
from llm_guard_sdk.adapters.fastapi import install, sse_response, websocket_chat
from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.trimming import ContextStats, TokenCounter, parse_history
from tests.support import Model, client_for, make_guard, ws_connect, ws_frames, ws_send

pytestmark = pytest.mark.anyio

WORDS = TokenCounter(lambda text: text.split(), message_overhead=1, reply_overhead=2)


class Client:
    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    async def send_text(self, text: str) -> None:
        self.frames.append(json.loads(text))


class Recording:
    """A handler that records the history of every request and answers ``n`` words."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.seen: list[list[dict[str, str]]] = []

    def __call__(self, request: ChatRequest) -> AsyncIterable[str]:
        self.seen.append([dict(m) for m in request.history])
        return self.model.stream(request.prompt, int(request.message.get("n", 2)))


def protocol(handler: Recording, client: Client, max_tokens: int,
             stats: ContextStats | None = None) -> ChatProtocol:
    trimmer = HistoryTrimmer(max_tokens, ContextBudget(tokenizer=WORDS), stats or ContextStats())
    return ChatProtocol(handler, client.send_text, session=None, max_bytes=4096,
                        trimmer=trimmer)


def frame(prompt: str, **extra: Any) -> str:
    return json.dumps({"prompt": prompt, **extra})


async def test_every_generation_sees_a_history_within_the_budget() -> None:
    model, client, stats = Model(), Client(), ContextStats()
    handler = Recording(model)
    chat = protocol(handler, client, 20, stats)
    for turn in range(12):
        assert await chat.on_frame(frame(f"question {turn} here"), None) is None
    assert [f["type"] for f in client.frames].count("done") == 12
    assert all(WORDS.total(seen) <= 20 for seen in handler.seen)
    answer = {"role": "assistant", "content": "t0t1"}
    assert handler.seen[-1] == [{"role": "user", "content": "question 9 here"}, answer,
                                {"role": "user", "content": "question 10 here"}, answer,
                                {"role": "user", "content": "question 11 here"}]
    assert all(seen[0]["role"] == "user" for seen in handler.seen)  # no orphaned answers
    # Two earlier turns fit (2 + 4 + 2 * 6 = 18): each trim from the fourth prompt on drops
    # one turn (user 4 + assistant 2 tokens).
    doc = stats.status()
    assert doc["trims_total"] == 9 and doc["trimmed_messages_total"] == 18
    assert doc["trimmed_tokens_total"] == 54 == chat.trimmer.trimmed_tokens
    assert model.open == 0


async def test_a_client_history_replaces_the_conversation_and_is_trimmed_too() -> None:
    handler, client = Recording(Model()), Client()
    chat = protocol(handler, client, 20)
    await chat.on_frame(frame("first"), None)
    history = [{"role": "system", "content": "be brief", "name": "policy", "n": 3},
               {"role": "user", "content": "old words " * 6}, {"role": "assistant", "content": "x"}]
    assert await chat.on_frame(frame("now", history=history), None) is None
    assert handler.seen[-1] == [{"role": "system", "content": "be brief", "name": "policy"},
                                {"role": "user", "content": "now"}]
    assert chat.history[-1] == {"role": "assistant", "content": "t0t1"}


@pytest.mark.parametrize(("history", "reason"), [
    ("not a list", "history must be a list of messages, got str"),
    ([{"role": "user", "content": 3}], "history[0].content must be a string, got int"),
    ([{"role": "wizard" * 40, "content": "x"}], "history[0].role must be one of system, user"),
])
async def test_a_history_that_is_not_a_list_of_messages_closes_with_1003(
        history: Any, reason: str) -> None:
    handler, client, stats = Recording(Model()), Client(), ContextStats()
    chat = protocol(handler, client, 20, stats)
    reject = await chat.on_frame(frame("hi", history=history), None)
    assert reject is not None and reject.code == WS_UNSUPPORTED_DATA
    assert reject.reason.startswith(reason) and len(reject.reason.encode()) <= 123
    assert handler.seen == [] and client.frames == [] and chat.history == []
    assert stats.invalid_histories_total == 1


async def test_a_prompt_over_the_budget_is_refused_and_not_kept() -> None:
    model, client, stats = Model(), Client(), ContextStats()
    handler = Recording(model)
    chat = protocol(handler, client, 20, stats)
    await chat.on_frame(frame("hello"), None)
    await chat.on_frame(frame("word " * 30), None)
    assert client.frames[-1] == {"type": "error", "status": 400, "error": (
        "the prompt needs 33 tokens with the system prompt; the history budget is 20")}
    assert chat.history == [{"role": "user", "content": "hello"},
                            {"role": "assistant", "content": "t0t1"}]
    assert len(handler.seen) == 1 and model.started == 1 and stats.over_budget_total == 1
    assert stats.trims_total == 0 and stats.trimmed_tokens_total == 0  # not applied
    await chat.on_frame(frame("again"), None)  # the connection stays usable
    assert client.frames[-1] == {"type": "done", "turns": 2}


async def test_a_failing_strategy_answers_an_error_and_the_chat_goes_on() -> None:
    class Broken:
        name = "broken"

        def plan(self, view: Any) -> Any:
            raise KeyError("bug")

    model, client, stats = Model(), Client(), ContextStats()
    handler = Recording(model)
    chat = ChatProtocol(handler, client.send_text, session=None, max_bytes=4096,
                        trimmer=HistoryTrimmer(100, ContextBudget(strategy=Broken()), stats))
    assert await chat.on_frame(frame("a"), None) is None  # one message: nothing to plan
    assert await chat.on_frame(frame("b"), None) is None
    assert client.frames[-1] == {"type": "error", "status": 500,
                                 "error": "the conversation history could not be trimmed"}
    assert chat.history == [{"role": "user", "content": "a"},
                            {"role": "assistant", "content": "t0t1"}]
    assert stats.errors_total == 1 and stats.last_error == "KeyError: 'bug'"
    assert len(handler.seen) == 1 and model.open == 0


async def test_zero_turns_trimming_off() -> None:
    handler, client = Recording(Model()), Client()
    chat = protocol(handler, client, 0)
    for turn in range(30):
        await chat.on_frame(frame(f"question {turn}"), None)
    assert len(chat.history) == 60 and chat.trimmer.trimmed_tokens == 0


@pytest.mark.parametrize(("budget", "error"), [
    ({"max_tokens": -1}, "max_tokens must be an int >= 0"),
    ({"max_tokens": 2.5}, "max_tokens must be an int >= 0"),
    ({"strategy": "oldest"}, "unknown trimming strategy 'oldest'"),
])
def test_a_bad_budget_fails_where_the_app_is_built(budget: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ContextBudget(**budget)


def test_close_reasons_fit_a_close_frame_on_a_character_boundary() -> None:
    assert close_reason("short") == "short"
    cut = close_reason("é" * 100)
    assert len(cut.encode()) <= 123 and cut.endswith("...") and "\ufffd" not in cut


def test_the_history_budget_setting_reads_the_environment_and_checks_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert ChatSettings.defaults().max_history_tokens == 32768
    monkeypatch.setenv("LLM_GUARD_MAX_HISTORY_TOKENS", "0")
    assert ChatSettings().max_history_tokens == 0
    assert history_trimmer().max_tokens == 0  # no guard serving: the environment
    assert history_trimmer(ContextBudget(max_tokens=64)).max_tokens == 64
    monkeypatch.setenv("LLM_GUARD_MAX_HISTORY_TOKENS", "-5")
    with pytest.raises(ConfigError, match="LLM_GUARD_MAX_HISTORY_TOKENS='-5' is invalid"):
        ChatSettings()


# -- through FastAPI in process: the guard's status, 1003, and 400 for an HTTP endpoint ----

def fastapi_app(model: Model, max_tokens: int) -> tuple[FastAPI, Any]:
    guard = make_guard(extensions=[ChatSettings.defaults(max_history_tokens=max_tokens)])
    app = FastAPI()
    install(app, guard=guard)

    @app.websocket("/ws/chat")
    async def ws_chat(websocket: WebSocket) -> None:
        await websocket_chat(websocket, lambda r: model.stream(r.prompt, 2))

    async def answer(history: object) -> AsyncIterator[str]:
        messages = parse_history(history)  # InvalidHistoryError: a 400 with wait_first
        yield f"{len(messages)} messages"

    @app.post("/chat")
    async def chat(body: dict[str, Any]) -> Any:
        return sse_response(answer(body.get("history")), wait_first=True)

    return app, guard


async def test_the_guard_status_reports_trimmed_tokens() -> None:
    model = Model()
    app, guard = fastapi_app(model, 60)
    assert guard.status()["context"]["trimmed_tokens_total"] == 0  # there from start-up
    comm = await ws_connect(app)
    for turn in range(10):
        await ws_send(comm, {"prompt": f"this is question number {turn}"})
        assert (await ws_frames(comm))[-1]["type"] == "done"
    doc = guard.status()["context"]
    assert doc["trims_total"] > 0 and doc["trimmed_messages_total"] >= 2 * doc["trims_total"]
    assert doc["trimmed_tokens_total"] > 0
    await comm.send_input({"type": "websocket.disconnect", "code": 1000})
    await comm.wait(5)


async def test_fastapi_closes_a_socket_sending_a_bad_history_with_1003() -> None:
    app, guard = fastapi_app(Model(), 60)
    comm = await ws_connect(app)
    await ws_send(comm, {"prompt": "hi", "history": {"role": "user"}})
    closed = await comm.receive_output(5)
    assert closed == {"type": "websocket.close", "code": 1003,
                      "reason": "history must be a list of messages, got dict"}
    await comm.wait(5)
    assert guard.status()["context"]["invalid_histories_total"] == 1


async def test_an_http_endpoint_answers_a_bad_history_with_400() -> None:
    app, _ = fastapi_app(Model(), 60)
    async with client_for(app) as client:
        bad = await client.post("/chat", json={"history": [{"role": "user"}]})
        good = await client.post("/chat", json={"history": [{"role": "user", "content": "x"}]})
    assert bad.status_code == 400
    assert bad.json() == {"error": "history[0].content must be a string, got NoneType",
                          "reason": "invalid_history"}
    assert good.status_code == 200 and "1 messages" in good.text


def test_a_guard_config_alone_does_not_know_the_chat_variables() -> None:
    assert not hasattr(GuardConfig.defaults(), "max_history_tokens")
