"""OpenAI's chunk format: framed by the SSE helpers, read back by the ``openai`` client itself.

In process (httpx's ASGI transport under ``AsyncOpenAI``) for every ending: completion,
eviction, a backend error mid-stream and before it, ``text_completion``; the SSE ``id:`` and
``retry:`` fields; and the request checks of ``POST /v1/chat/completions``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request

from llm_guard_sdk import CloseReason, current_session
from llm_guard_sdk.adapters.fastapi import GuardedSSEResponse, install, sse_response
from llm_guard_sdk.adapters.openai_chunks import OpenAIChunks
from llm_guard_sdk.adapters.openai_requests import OpenAIRequestError, parse_chat_completion
from llm_guard_sdk.adapters.sse import Event, SSEEvents, encode_sse
from llm_guard_sdk.guard import Guard, current_guard
from tests.support import Model, make_guard, sse_events

pytestmark = pytest.mark.anyio


def guarded_app(model: Model) -> tuple[FastAPI, Guard]:
    app = FastAPI()
    guard = install(app, guard=make_guard())

    async def evicted_after_one() -> AsyncIterator[str]:
        yield "t0"
        session, guard_now = current_session(), current_guard()
        assert session is not None and guard_now is not None
        asyncio.get_running_loop().create_task(
            guard_now.close_session(session, CloseReason.EVICTED))
        await asyncio.sleep(60)
        yield "never"

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> GuardedSSEResponse:
        body = parse_chat_completion(await request.body())
        prompt = body.messages[-1]["content"]
        source = evicted_after_one() if prompt == "evict" else model.stream(prompt, 3)
        return sse_response(source, framing=OpenAIChunks(body.model or "m"), wait_first=True)

    return app, guard


def client(app: FastAPI) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=("127.0.0.1", 1)))
    return openai.AsyncOpenAI(base_url="http://testserver/v1", api_key="x", http_client=http,
                              max_retries=0)


async def ask(oai: openai.AsyncOpenAI, prompt: str) -> list[Any]:
    stream = await oai.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": prompt}], stream=True)
    return [chunk async for chunk in stream]


async def test_the_openai_client_reads_a_guarded_stream() -> None:
    model = Model()
    app, guard = guarded_app(model)
    chunks = await ask(client(app), "hello")
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "t0t1t2"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, None, "stop"]
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].id.startswith("chatcmpl-")
    assert {c.model for c in chunks} == {"tiny"}
    assert chunks[0].object == "chat.completion.chunk"
    assert model.open == 0 and guard.registry.streams_open == 0


async def test_eviction_reaches_the_openai_client_as_an_api_error() -> None:
    app, guard = guarded_app(Model())
    with pytest.raises(openai.APIError, match="evicted") as caught:
        await ask(client(app), "evict")
    assert caught.value.body == {"message": "llm-guard stopped the stream: evicted",
                                 "type": "server_error", "param": None, "code": "evicted"}
    assert guard.registry.counters.evicted_total == 1


async def test_backend_errors_are_openai_errors_before_and_during_the_stream() -> None:
    model = Model()
    app, _ = guarded_app(model)
    oai = client(app)
    with pytest.raises(openai.BadRequestError) as rejected:  # before the first token: a 400
        await ask(oai, "reject")
    assert rejected.value.status_code == 400
    assert rejected.value.body == {"message": "prompt too long for this model",
                                   "type": "invalid_request_error", "param": None, "code": 400}
    with pytest.raises(openai.APIError, match="engine is dead"):  # mid-stream: an error chunk
        await ask(oai, "die")
    assert model.open == 0


async def collect(events: SSEEvents) -> str:
    try:
        return "".join([encode_sse(event) async for event in events])
    finally:
        await events.aclose()


async def test_text_completion_shape_and_done() -> None:
    framing = OpenAIChunks("tiny", kind="completion", request_id="cmpl-1", created=7)
    body = await collect(SSEEvents(Model().stream("x", 2), ping=None, framing=framing))
    events = sse_events(body)
    assert events[-1] == ("message", "[DONE]")
    docs = [json.loads(data) for _, data in events[:-1]]
    assert [d["choices"][0]["text"] for d in docs] == ["t0", "t1", ""]
    assert [d["choices"][0]["finish_reason"] for d in docs] == [None, None, "stop"]
    assert {(d["id"], d["object"], d["created"], d["model"]) for d in docs} == {
        ("cmpl-1", "text_completion", 7, "tiny")}


async def test_a_finish_reason_from_the_source_is_kept() -> None:
    async def source() -> AsyncIterator[object]:
        yield "a"
        yield {"text": "b", "finish_reason": "length"}

    body = await collect(SSEEvents(source(), ping=None, framing=OpenAIChunks("m")))
    docs = [json.loads(data) for _, data in sse_events(body)[:-1]]
    assert [d["choices"][0]["delta"].get("content") for d in docs] == ["a", "b", None]
    assert docs[-1]["choices"][0]["finish_reason"] == "length"


def test_the_framer_writes_id_and_retry() -> None:
    assert encode_sse(Event("token", "a", id="7", retry=1500)) == (
        "id: 7\nretry: 1500\nevent: token\ndata: a\n\n")
    assert encode_sse(Event(None, None, "ping", retry=10)) == ": ping\nretry: 10\n\n"
    with pytest.raises(ValueError, match="line break"):
        encode_sse(Event(None, "a", id="1\n2"))
    with pytest.raises(ValueError, match="retry must be"):
        SSEEvents(Model().stream("x"), retry=-1)
    with pytest.raises(ValueError, match="event_type only applies"):
        SSEEvents(Model().stream("x"), event_type="t", framing=OpenAIChunks("m"))


async def test_event_ids_number_events_and_retry_goes_once() -> None:
    body = await collect(SSEEvents(Model().stream("x", 2), ping=None, retry=3000,
                                   event_ids=True))
    assert body == ("id: 1\nretry: 3000\ndata: t0\n\nid: 2\ndata: t1\n\n"
                    "id: 3\nevent: done\ndata: {}\n\n")


@pytest.mark.parametrize(("body", "param"), [
    (b"{not json", None),
    (b"[1]", None),
    (b"{}", "messages"),
    (b'{"messages": []}', "messages"),
    (b'{"messages": [{"role": "wizard", "content": "x"}]}', "messages[0].role"),
    (b'{"messages": [{"role": "user", "content": 3}]}', "messages[0].content"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', "stream"),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens"),
    (b"\xff\xfe", None),
])
def test_bad_request_bodies_are_rejected_with_an_openai_error(body: bytes,
                                                              param: str | None) -> None:
    with pytest.raises(OpenAIRequestError) as caught:
        parse_chat_completion(body)
    error = caught.value.document()["error"]
    assert isinstance(error, dict)
    assert error["type"] == "invalid_request_error" and error["param"] == param


def test_a_good_request_is_parsed() -> None:
    parsed = parse_chat_completion(json.dumps({
        "model": "tiny", "stream": True, "max_completion_tokens": 5,
        "messages": [{"role": "system", "content": "be brief"},
                     {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }).encode())
    assert (parsed.model, parsed.stream, parsed.max_tokens) == ("tiny", True, 5)
    assert parsed.prompt() == "system: be brief\nuser: hi\nassistant:"
