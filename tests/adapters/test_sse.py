"""The one SSE framer and the guarded event stream, without any framework."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from llm_guard_sdk import CloseReason
from llm_guard_sdk.adapters.sse import (
    PING,
    SSE_HEADERS,
    Event,
    SSEEvents,
    encode_sse,
    sse_event,
    sse_json,
)
from llm_guard_sdk.errors import InvalidRequestError
from tests.support import Model, sse_events

pytestmark = pytest.mark.anyio


def test_encode_sse_gives_each_data_line_its_field() -> None:
    assert encode_sse(Event("token", "a\nb")) == "event: token\ndata: a\ndata: b\n\n"
    assert encode_sse(Event(None, "plain")) == "data: plain\n\n"
    assert encode_sse(PING) == ": ping\n\n"


def test_shorthands_frame_through_encode_sse() -> None:
    assert sse_event("x\ny", event="done") == encode_sse(Event("done", "x\ny"))
    framed = sse_json({"reason": "évicted", "n": 1}, event="evicted")
    assert framed == 'event: evicted\ndata: {"reason":"évicted","n":1}\n\n'
    assert sse_events(framed) == [("evicted", json.dumps({"reason": "évicted", "n": 1},
                                                         separators=(",", ":"),
                                                         ensure_ascii=False))]
    assert SSE_HEADERS == {"cache-control": "no-cache", "x-accel-buffering": "no"}


def test_negative_ping_is_refused() -> None:
    with pytest.raises(ValueError, match="ping must be seconds >= 0"):
        SSEEvents(Model().stream("x"), ping=-1)


async def collect(events: SSEEvents) -> str:
    try:
        return "".join([encode_sse(event) async for event in events])
    finally:
        await events.aclose()


async def test_items_become_data_events_then_done() -> None:
    model = Model()
    events = SSEEvents(model.stream("hi", 2), ping=None, event_type="token")
    assert sse_events(await collect(events)) == [("token", "t0"), ("token", "t1"),
                                                 ("done", "{}")]
    assert model.open == 0


async def test_non_text_items_are_decoded_or_json() -> None:
    async def items() -> AsyncIterator[object]:
        yield b"bytes \xff"
        yield {"a": [1, 2]}

    body = await collect(SSEEvents(items(), ping=None))
    assert sse_events(body) == [("message", "bytes \ufffd"), ("message", '{"a":[1,2]}'),
                                ("done", "{}")]


async def test_backend_error_mid_stream_ends_with_an_error_event() -> None:
    model = Model()
    body = await collect(SSEEvents(model.stream("die", 5), ping=None))
    assert sse_events(body) == [("message", "t0"), ("message", "t1"), (
        "error", '{"error":"the engine is dead; retry later","status":503}')]
    assert model.open == 0


async def test_prime_raises_what_the_backend_raised_before_the_first_item() -> None:
    model = Model()
    events = SSEEvents(model.stream("reject"), ping=None)
    with pytest.raises(InvalidRequestError, match="prompt too long"):
        await events.prime()
    await events.aclose()
    assert model.open == 0


async def test_silence_sends_pings_and_the_model_keeps_running() -> None:
    model = Model()
    events = SSEEvents(model.stream("wait", 1), ping=0.001)
    seen: list[Event] = []
    async for event in events:
        seen.append(event)
        if event == PING:
            model.release.set()
    await events.aclose()
    assert PING in seen
    assert [e for e in seen if e != PING] == [Event(None, "t0"), Event("done", "{}")]
    assert model.started == 1 and model.open == 0


async def test_a_stream_stopped_by_the_guard_announces_why() -> None:
    model = Model()
    events = SSEEvents(model.stream("x", 100), ping=None)
    seen: list[Event] = []
    async for event in events:
        seen.append(event)
        if len(seen) == 1:
            await events.stream.request_close(CloseReason.EVICTED)
    await events.aclose()
    assert seen[0] == Event(None, "t0")
    assert seen[-2:] == [Event("evicted", '{"reason":"evicted"}'), Event("done", "{}")]
    assert model.open == 0


async def test_aclose_after_prime_closes_the_model() -> None:
    model = Model()
    events = SSEEvents(model.stream("x", 3), ping=None)
    await events.prime()
    await events.aclose()
    assert events.stream.closed and model.open == 0


async def test_a_model_raising_mid_stream_ends_with_an_error_event(
        caplog: pytest.LogCaptureFixture) -> None:
    """Not a BackendError: after the 200 only an event can tell the client (logged once)."""

    async def failing() -> AsyncIterator[str]:
        yield "t0"
        raise RuntimeError("secret detail")

    body = await collect(SSEEvents(failing(), ping=None))
    assert sse_events(body) == [("message", "t0"), (
        "error", '{"error":"the model failed while streaming","status":500}')]
    assert "secret detail" not in body
    [record] = [r for r in caplog.records if "raised mid-stream" in r.getMessage()]
    assert record.exc_info is not None and "RuntimeError" in record.getMessage()
