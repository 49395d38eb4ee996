"""RemoteEngine against misbehaving servers (no vLLM needed): clear errors, no open stream."""

from __future__ import annotations

import re

import httpx
import pytest

from llm_guard_sdk import Guard, GuardConfig
from llm_guard_sdk.breakers import BreakerOpenError, Breakers, BreakerSettings
from llm_guard_sdk.engines.openai import RemoteEngine, SSEDecoder
from llm_guard_sdk.errors import BackendError, InvalidRequestError
from tests.support import free_port, until

from .fake_server import fake_openai

pytestmark = pytest.mark.anyio


async def drain(engine: RemoteEngine, **kwargs: object) -> BackendError:
    with pytest.raises(BackendError) as info:
        async for _ in engine.stream("hi", max_tokens=8, **kwargs):  # type: ignore[arg-type]
            pass
    return info.value


def test_decoder_joins_split_events_skips_comments_and_bounds_its_buffer() -> None:
    decoder = SSEDecoder(max_event_bytes=64)
    assert decoder.feed(b": ping\r\n\r\ndata: {\"a\"") == []
    assert decoder.buffered_bytes == len(b'data: {"a"')
    assert decoder.feed(b": 1}\r\n\r\ndata: [DONE]\n\n") == ['{"a": 1}', "[DONE]"]
    assert decoder.buffered_bytes == 0
    with pytest.raises(BackendError) as info:
        decoder.feed(b"data: " + b"x" * 100)
    assert info.value.status == 502 and info.value.reason == "remote_protocol"


@pytest.mark.parametrize("kwargs, message", [
    ({"prompt": None}, "prompt must be text"),
    ({"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, "either prompt"),
    ({"prompt": None, "messages": "hello"}, "messages must be"),
    ({"prompt": None, "messages": [{"role": "user"}]}, "messages[0]"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "params": {"stream": False}}, "may not set stream"),
    ({"prompt": "x", "request_id": "bad id"}, "request_id"),
])
async def test_bad_arguments_are_400_before_any_request(kwargs: dict[str, object],
                                                        message: str) -> None:
    engine = RemoteEngine(f"http://127.0.0.1:{free_port()}/v1", "tiny")
    try:
        prompt = kwargs.pop("prompt")
        with pytest.raises(InvalidRequestError, match=message.replace("[", r"\[")):
            engine.stream(prompt, **kwargs)  # type: ignore[arg-type]
        assert engine.requests_total == 0
    finally:
        await engine.aclose()


def test_bad_base_url_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="http"):
        RemoteEngine("127.0.0.1:8000", "tiny")


@pytest.mark.parametrize("mode, status, reason", [
    ("garbage", 502, "remote_protocol"),
    ("garbage_sse", 502, "remote_protocol"),
    ("cut", 502, "remote_incomplete"),
    ("error500", 503, "remote_error"),
])
async def test_misbehaving_server_gives_a_clear_error_and_no_open_stream(
        mode: str, status: int, reason: str) -> None:
    async with fake_openai(mode) as (url, state):
        engine = RemoteEngine(url, "tiny")
        try:
            error = await drain(engine)
            assert (error.status, error.reason) == (status, reason)
            assert "secret" not in error.message and "Traceback" not in error.message
            assert engine.open_streams == 0 and engine.errors_by_status == {status: 1}
            await until(lambda: state["open"] == 0)
        finally:
            await engine.aclose()
    if status == 503:
        assert error.headers() == {"retry-after": "5"}


async def test_slow_server_times_out_per_chunk_and_its_connection_is_closed() -> None:
    async with fake_openai("slow") as (url, state):
        engine = RemoteEngine(url, "tiny", timeout=httpx.Timeout(5.0, read=0.5))
        try:
            error = await drain(engine)
            assert (error.status, error.reason) == (504, "remote_timeout")
            assert engine.open_streams == 0
            await until(lambda: state["open"] == 0, timeout=10)  # the server saw the close
        finally:
            await engine.aclose()


async def test_refused_connection_is_503_and_trips_the_breaker() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",), retry_after=7))
    breakers = guard.add_extension(Breakers(BreakerSettings.defaults()))
    engine = RemoteEngine(f"http://127.0.0.1:{free_port()}/v1", "tiny", guard=guard,
                          name="fleet")
    try:
        error = await drain(engine)
        assert (error.status, error.reason) == (503, "remote_unreachable")
        assert error.headers() == {"retry-after": "7"}
        assert breakers.get("fleet").state.value == "open"
        refused = await drain(engine)  # the open breaker refuses without connecting
        assert isinstance(refused, BreakerOpenError) and refused.status == 503
        assert engine.status()["errors_total"] == 2
        assert guard.status()["fleet"]["open_streams"] == 0
    finally:
        await engine.aclose()


async def test_closing_the_stream_closes_the_connection_at_once() -> None:
    async with fake_openai("slow") as (url, state):
        engine = RemoteEngine(url, "tiny")
        try:
            stream = engine.stream("hi")
            assert await stream.__anext__() == "tok"
            assert engine.open_streams == 1 and state["open"] == 1
            await stream.aclose()
            assert engine.open_streams == 0 and engine.aborted_total == 1
            await until(lambda: state["open"] == 0, timeout=10)
        finally:
            await engine.aclose()


@pytest.mark.parametrize("env, message", [
    ({}, "LLM_GUARD_DEMO_REMOTE_URL=''"),
    ({"LLM_GUARD_DEMO_REMOTE_URL": "127.0.0.1:8001"}, "expected the server's OpenAI base URL"),
    ({"LLM_GUARD_DEMO_REMOTE_URL": "http://h:1/v1"}, "LLM_GUARD_DEMO_MODEL is required"),
    ({"LLM_GUARD_DEMO_REMOTE_URL": "http://h:1/v1", "LLM_GUARD_DEMO_MODEL": "tiny",
      "LLM_GUARD_DEMO_REMOTE_PARAMS": "[1]"}, "expected a JSON object"),
])
def test_demo_remote_backend_settings_are_checked(env: dict[str, str], message: str) -> None:
    from llm_guard_sdk.errors import ConfigError
    from llm_guard_sdk.testing.backends import select_backend

    with pytest.raises(ConfigError, match=re.escape(message)):
        select_backend({"LLM_GUARD_DEMO_BACKEND": "remote", **env})


def test_demo_remote_backend_from_env() -> None:
    from llm_guard_sdk.testing.backends import RemoteBackend, select_backend

    backend = select_backend({"LLM_GUARD_DEMO_BACKEND": "remote", "LLM_GUARD_DEMO_MODEL": "tiny",
                              "LLM_GUARD_DEMO_REMOTE_URL": "http://127.0.0.1:8001/v1",
                              "LLM_GUARD_DEMO_REMOTE_PARAMS": '{"ignore_eos": true}'})
    assert isinstance(backend, RemoteBackend) and backend.name == "remote"
    assert (backend.base_url, backend.model, backend.params) == (
        "http://127.0.0.1:8001/v1", "tiny", {"ignore_eos": True})
