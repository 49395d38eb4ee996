"""The demo's ``POST /v1/chat/completions`` under real uvicorn, read by the ``openai`` client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest

from tests.support import BASE_ENV, status, uvicorn_server, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with uvicorn_server("tests.support.apps.e2e_app:app", {
            **BASE_ENV, "LLM_GUARD_DEMO_RATE": "0"}) as base:
        yield base


@pytest.fixture
async def oai(server: str) -> AsyncIterator[openai.AsyncOpenAI]:
    http = httpx.AsyncClient(trust_env=False, timeout=60)
    async with openai.AsyncOpenAI(base_url=f"{server}/v1", api_key="x", http_client=http,
                                  max_retries=0) as client:
        yield client


async def test_streaming_chat_completion(server: str, oai: openai.AsyncOpenAI) -> None:
    stream = await oai.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello there"}], stream=True,
        max_tokens=12)
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text and chunks[-1].choices[0].finish_reason == "stop"
    assert len(chunks) == 13 and {c.model for c in chunks} == {"tiny"}
    async with httpx.AsyncClient(timeout=30, trust_env=False) as admin:
        async def ended() -> bool:
            return bool((await status(admin, server))["streams"]["open"] == 0)

        await wait_for(ended, timeout=30)
        doc = await status(admin, server)
        assert doc["streams"]["completed_total"] >= 1 and doc["errors"]["internal_total"] == 0


async def test_non_streaming_chat_completion(oai: openai.AsyncOpenAI) -> None:
    reply = await oai.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=5)
    assert reply.object == "chat.completion" and reply.choices[0].finish_reason == "stop"
    assert reply.choices[0].message.role == "assistant" and reply.choices[0].message.content


async def test_bad_bodies_get_400_with_an_openai_error(server: str,
                                                       oai: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(model="tiny", messages=[], stream=True)
    assert caught.value.status_code == 400
    async with httpx.AsyncClient(timeout=30, trust_env=False) as raw:
        for body in (b"{nope", b"[]", b'{"stream": true}',
                     b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 99999}'):
            response = await raw.post(f"{server}/v1/chat/completions", content=body,
                                      headers={"content-type": "application/json"})
            assert response.status_code == 400, (body, response.text)
            assert response.json()["error"]["type"] == "invalid_request_error"
