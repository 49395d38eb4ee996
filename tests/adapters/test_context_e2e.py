"""The history budget end to end: real uvicorn, real WebSocket clients, many turns.

Every demo (FastAPI, Litestar, Channels) trims its chats with ``LLM_GUARD_MAX_HISTORY_TOKENS``
and reports it under ``context`` in the status; the FastAPI test app also shows what each
generation was handed, so the budget is checked turn by turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
import websockets

from tests.support import APPS, BASE_ENV, chat_turn, status, uvicorn_server

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

BUDGET = 300
ENV = {**BASE_ENV, "LLM_GUARD_MAX_HISTORY_TOKENS": str(BUDGET),
       "LLM_GUARD_DEMO_RATE": "2000"}
PROMPT = "Tell me a little more about the weather in Paris, please."  # 58 bytes: 70+ tokens


def ws_url(base: str, path: str = "/ws/chat") -> str:
    return base.replace("http://", "ws://") + path


@pytest.fixture(scope="module", params=list(APPS))
def demo(request: pytest.FixtureRequest) -> Iterator[str]:
    with uvicorn_server(APPS[request.param], ENV) as base:
        yield base


async def test_a_long_chat_is_trimmed_and_the_status_counts_it(demo: str) -> None:
    async with httpx.AsyncClient(timeout=30) as admin:
        before = (await status(admin, demo))["context"]
        async with websockets.connect(ws_url(demo)) as ws:
            for turn in range(12):
                frames = await chat_turn(ws, f"{turn}: {PROMPT}", 4)
                assert frames[-1] == {"type": "done", "turns": turn + 1}, frames
        after = (await status(admin, demo))["context"]
    # A turn costs over 100 tokens (a 70-token prompt and its answer): at most two fit the
    # budget, so most prompts drop one, whole (its question and answer), never less.
    trims = after["trims_total"] - before["trims_total"]
    assert trims >= 6
    assert after["trimmed_messages_total"] - before["trimmed_messages_total"] >= 2 * trims
    assert after["trimmed_tokens_total"] - before["trimmed_tokens_total"] >= 70 * trims
    assert after["over_budget_total"] == before["over_budget_total"]


@pytest.fixture(scope="module")
def history_app() -> Iterator[str]:
    with uvicorn_server("tests.adapters.apps.context_app:app", ENV) as base:
        yield base


async def test_every_generation_gets_a_history_within_the_budget(history_app: str) -> None:
    sizes: list[tuple[int, int]] = []
    async with websockets.connect(ws_url(history_app, "/ws/history")) as ws:
        await ws.send(json.dumps({"prompt": PROMPT, "history": [
            {"role": "system", "content": "You are terse."}]}))
        for turn in range(15):
            if turn:
                await ws.send(json.dumps({"prompt": f"{turn}: {PROMPT}"}))
            frames = []
            while not frames or frames[-1]["type"] not in ("done", "error"):
                frames.append(json.loads(await ws.recv()))
            assert frames[-1]["type"] == "done", frames
            messages, tokens = map(int, frames[0]["text"].split())
            sizes.append((messages, tokens))
        assert all(tokens <= BUDGET for _, tokens in sizes), sizes
        assert max(messages for messages, _ in sizes) < 8  # it stopped growing
        assert sizes[-1][0] == sizes[-2][0]  # a steady window: system, turns, the prompt
        await ws.send(json.dumps({"prompt": "x", "history": [{"role": "user"}]}))
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
    assert closed.value.rcvd.reason == "history[0].content must be a string, got NoneType"
    async with httpx.AsyncClient(timeout=30) as admin:
        doc = (await status(admin, history_app))["context"]
    assert doc["trimmed_tokens_total"] > 0 and doc["invalid_histories_total"] == 1
