"""KV bytes are accounted per request (per guarded stream) and summed per session (issue 9, A7).

A fake engine with vLLM's ``AsyncLLM`` surface drives two concurrent requests of one session
step by step, so the test controls exactly when each one grows and ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig
from llm_guard_sdk.engines.vllm.streaming import VLLMStreams

pytestmark = pytest.mark.anyio
PER_TOKEN = 2 * 2 * 4 * 32 * 4  # the tiny model's KV bytes per token


class FakeEngine:
    """Yields one token per ``step(rid)``; finishes a request on ``finish(rid)``."""

    def __init__(self) -> None:
        parallel = SimpleNamespace()
        self.model_config = SimpleNamespace(
            dtype="float32", get_num_layers=lambda p: 2, get_num_kv_heads=lambda p: 4,
            get_head_size=lambda: 32)
        self.vllm_config = SimpleNamespace(parallel_config=parallel,
                                           cache_config=SimpleNamespace(cache_dtype="auto"))
        self.gates: dict[str, asyncio.Queue[bool]] = {}
        self.aborted: list[str] = []

    def get_num_unfinished_requests(self) -> int:
        return len(self.gates)

    async def generate(self, prompt: dict[str, Any], params: Any, rid: str) -> AsyncIterator[Any]:
        gate = self.gates.setdefault(rid, asyncio.Queue())
        try:
            while True:
                finished = await gate.get()
                completion = SimpleNamespace(token_ids=[1], text="t",
                                             finish_reason="length" if finished else None)
                yield SimpleNamespace(outputs=[completion], finished=finished,
                                      prompt_token_ids=prompt["prompt_token_ids"])
                if finished:
                    return
        finally:
            del self.gates[rid]

    async def abort(self, rid: str) -> None:
        self.aborted.append(rid)

    def step(self, rid: str, *, finished: bool = False) -> None:
        self.gates.setdefault(rid, asyncio.Queue()).put_nowait(finished)


async def test_two_concurrent_requests_of_one_session_add_up() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    engine = FakeEngine()
    streams = VLLMStreams(engine)
    assert streams.bytes_per_token == PER_TOKEN
    session = guard.registry.open("websocket")
    first = streams.stream([1, 2, 3], request_id="a", session=session)  # 3 prompt tokens
    second = streams.stream([1] * 10, request_id="b", session=session)  # 10 prompt tokens

    async def pull(stream: Any, rid: str, *, finished: bool = False) -> None:
        engine.step(rid, finished=finished)
        assert await asyncio.wait_for(anext(stream), 5) == "t"

    await pull(first, "a")
    assert session.backend_bytes == 4 * PER_TOKEN
    await pull(second, "b")
    await pull(second, "b")
    # Concurrent requests no longer overwrite each other: a holds 4 tokens, b 12.
    assert (first.backend_bytes, second.backend_bytes) == (4 * PER_TOKEN, 12 * PER_TOKEN)
    assert session.backend_bytes == session.held_bytes == 16 * PER_TOKEN
    assert guard.status()["held"]["backend_bytes"] == 16 * PER_TOKEN

    await pull(first, "a", finished=True)
    with pytest.raises(StopAsyncIteration):
        await anext(first)
    # The first to finish releases only its own bytes.
    assert session.backend_bytes == 12 * PER_TOKEN
    assert session.bucket == (12 * PER_TOKEN).bit_length()

    await guard.close_session(session, CloseReason.DISCONNECTED)
    assert session.backend_bytes == 0
    assert engine.aborted == ["b"]
    assert guard.registry.streams_open == 0
