"""The vLLM integration's pure parts, which need no vLLM: request inputs, KV stats, KV source."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from llm_guard_sdk.engines.vllm.inputs import (
    check_request_id,
    engine_prompt,
    new_request_id,
    safe_message,
)
from llm_guard_sdk.engines.vllm.kv import KVCacheSource, KVStats, kv_capacity_bytes
from llm_guard_sdk.errors import InvalidRequestError


def test_request_ids_are_random_or_checked() -> None:
    first, second = new_request_id(), new_request_id()
    assert first != second and first.startswith("llmg-") and len(first) == 5 + 24
    assert check_request_id("req-1") == "req-1"
    for bad in ("", "has space", "x" * 129, "é", 7):
        with pytest.raises(InvalidRequestError, match="1-128 printable ASCII"):
            check_request_id(bad)


def test_engine_prompt_takes_text_token_ids_or_messages() -> None:
    assert engine_prompt(None, "hi", None) == {"prompt": "hi"}
    assert engine_prompt(None, (1, 2, 3), None) == {"prompt_token_ids": [1, 2, 3]}
    for bad in ([1, -2], [1.5], None):
        with pytest.raises(InvalidRequestError, match="text or a sequence of token ids"):
            engine_prompt(None, bad, None)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="either prompt or messages"):
        engine_prompt(None, "hi", [{"role": "user", "content": "x"}])

    class Tokenizer:
        def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
            assert kwargs == {"tokenize": False, "add_generation_prompt": True}
            return "|".join(m["content"] for m in messages)

    engine = SimpleNamespace(get_tokenizer=Tokenizer)
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert engine_prompt(engine, None, messages) == {"prompt": "a|b"}
    broken = SimpleNamespace(get_tokenizer=lambda: None)
    with pytest.raises(InvalidRequestError, match="cannot apply the chat template"):
        engine_prompt(broken, None, messages)


def test_safe_message_keeps_the_first_line_short() -> None:
    assert safe_message(ValueError("too long\nprompt text here")) == "too long"
    assert safe_message(ValueError("x" * 500)) == "x" * 300
    assert safe_message(ValueError("  ")) == "ValueError"


def test_kv_stats_copy_fields_and_never_raise() -> None:
    stats = KVStats()
    stats.update(SimpleNamespace(kv_cache_usage=0.5, num_running_reqs=2, num_waiting_reqs=3))
    assert (stats.kv_cache_usage, stats.num_running_reqs, stats.num_waiting_reqs,
            stats.records_total) == (0.5, 2, 3, 1)
    stats.update(object())  # a malformed record is ignored, not raised into vLLM's loop
    assert stats.records_total == 1 and stats.kv_cache_usage == 0.5


class Owner:
    def __init__(self, capacity: int | None, unfinished: int) -> None:
        self.kv = KVStats()
        self.kv.kv_cache_usage, self.kv.num_running_reqs, self.kv.num_waiting_reqs = 0.25, 1, 4
        self.capacity, self.busy = capacity, unfinished

    def kv_capacity_bytes(self) -> int | None:
        return self.capacity

    def unfinished(self) -> int:
        return self.busy


def test_kv_source_reads_usage_in_bytes_and_zero_when_idle() -> None:
    reading = KVCacheSource(Owner(4000, 1)).read()
    assert (reading.name, reading.used_bytes, reading.limit_bytes) == ("vllm_kv", 1000, 4000)
    assert reading.detail == {"running": 1, "waiting": 4}
    assert KVCacheSource(Owner(4000, 0)).read().used_bytes == 0  # stale usage of an idle engine
    assert KVCacheSource(Owner(None, 1)).read().limit_bytes == 1_000_000  # cache not sized yet


def test_kv_capacity_needs_the_allocated_block_count() -> None:
    def engine(blocks: int | None) -> Any:
        cache = SimpleNamespace(num_gpu_blocks=blocks, block_size=16)
        return SimpleNamespace(vllm_config=SimpleNamespace(cache_config=cache))

    assert kv_capacity_bytes(engine(10), 2048) == 10 * 16 * 2048
    assert kv_capacity_bytes(engine(None), 2048) is None
