"""Counts against the tiny model's real tokenizer and chat template (no vLLM needed).

The tokenizer is trained offline by ``llm_guard_sdk.testing.tiny_tokenizer`` (half a second),
and the template rendered with jinja2 as ``transformers`` would, so these tests check the
documented claims: the byte estimate never under-counts, bytes / 3 would, and the default
template overheads cover the tiny model's template.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any

import pytest

from llm_guard_sdk.testing.tiny_tokenizer import BOS_TOKEN, CHAT_TEMPLATE, train_tokenizer
from llm_guard_sdk.trimming import TokenCounter, trim_history
from llm_guard_sdk.trimming.counting import RememberingCounter

tokenizers = pytest.importorskip("tokenizers")
jinja2 = pytest.importorskip("jinja2")

TEXTS = [
    "Tell me about the weather in Paris tomorrow, please.",
    "What is 2+2? And 17*23?",
    "Résumé naïve café 日本語のテキスト",
    "zxqv jjkw ppl qqq",
    "The server streams the next token quickly.",
    "x",
    "",
    "import json\n\ndef main():\n    print('hello, world')\n",
]

CONVERSATIONS = [
    [{"role": "user", "content": TEXTS[0]}],
    [{"role": "system", "content": "Be brief."}, *({"role": r, "content": t} for r, t in zip(
        ["user", "assistant", "user", "assistant", "user"], TEXTS[1:6], strict=True))],
    [{"role": "user", "content": TEXTS[7]}, {"role": "assistant", "content": "calling"},
     {"role": "tool", "content": TEXTS[2]}],
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = pathlib.Path(tmp_path_factory.mktemp("tiny-tokenizer"))
    train_tokenizer(directory, 512, 2048)
    return tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))


def template_tokens(tiny: Any, messages: list[dict[str, str]]) -> int:
    """Tokens of the prompt the engine builds: the chat template, rendered and tokenized."""
    text = jinja2.Environment().from_string(CHAT_TEMPLATE).render(
        messages=messages, bos_token=BOS_TOKEN, add_generation_prompt=True)
    return len(tiny.encode(text).ids)


@pytest.mark.parametrize("text", TEXTS)
def test_the_byte_estimate_never_counts_fewer_tokens_than_the_tokenizer(tiny: Any,
                                                                        text: str) -> None:
    exact = TokenCounter(tiny).text_tokens(text)
    assert exact == len(tiny.encode(text).ids)
    assert TokenCounter().text_tokens(text) >= exact


def test_bytes_over_three_would_under_count_the_tiny_tokenizer(tiny: Any) -> None:
    text = TEXTS[0]
    assert len(tiny.encode(text).ids) > math.ceil(len(text.encode()) / 3)


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_the_default_overheads_cover_the_tiny_chat_template(tiny: Any,
                                                            messages: list[dict[str, str]]) -> None:
    real = template_tokens(tiny, messages)
    assert TokenCounter(tiny).total(messages) >= real
    assert TokenCounter().total(messages) >= real


def test_a_trimmed_history_fits_the_real_prompt_under_the_budget(tiny: Any) -> None:
    history = [{"role": "system", "content": "Answer in one line."}]
    for i in range(40):
        history += [{"role": "user", "content": f"Question {i}: {TEXTS[i % 5]}"},
                    {"role": "assistant", "content": TEXTS[(i + 2) % 5]}]
    history.append({"role": "user", "content": TEXTS[0]})
    for tokenizer in (tiny, None):
        result = trim_history(history, 300, tokenizer=tokenizer)
        assert result.trimmed and not result.over_budget
        assert template_tokens(tiny, result.messages) <= result.tokens_after <= 300
    exact = trim_history(history, 300, tokenizer=tiny)
    estimated = trim_history(history, 300)
    assert len(estimated.messages) < len(exact.messages)  # the estimate keeps less: over-counts


def test_a_remembering_counter_tokenizes_each_message_once_while_it_is_kept() -> None:
    calls: list[str] = []

    def encode(text: str) -> list[int]:
        calls.append(text)
        return [0] * len(text.split())

    counter = RememberingCounter(TokenCounter(encode))
    first, second = {"role": "user", "content": "a b"}, {"role": "user", "content": "c"}
    assert counter.total([first, second]) == counter.total([first, second])
    assert calls == ["a b", "c"]
    counter.keep_only([second])
    counter.total([first, second])
    assert calls == ["a b", "c", "a b"]
