"""The relevance strategy and the summarisation hook (sync and async, success and failure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from llm_guard_sdk.trimming import (
    SUMMARY_PREFIX,
    Message,
    Relevance,
    Summarize,
    TokenCounter,
    atrim_history,
    tfidf_similarities,
    trim_history,
)


def words() -> TokenCounter:
    return TokenCounter(lambda text: text.split(), message_overhead=1, reply_overhead=2)


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


SYS = msg("system", "be helpful")                                     # 3
TURNS = [
    [msg("user", "how do I bake bread at home"), msg("assistant", "flour water yeast")],
    [msg("user", "what is the weather in Paris"), msg("assistant", "sunny and mild")],
    [msg("user", "recommend a novel"), msg("assistant", "try Dune")],
    [msg("user", "and the weather in Rome"), msg("assistant", "hot")],
]
HISTORY = [SYS, *(m for turn in TURNS for m in turn), msg("user", "will Paris weather hold")]


def test_tfidf_similarity_is_one_for_the_same_words_and_zero_for_none_shared() -> None:
    same, other, empty = tfidf_similarities("Paris weather", ["weather, Paris!", "bread", ""])
    assert same == pytest.approx(1.0) and other == 0.0 and empty == 0.0


def test_relevance_keeps_the_most_similar_older_turns_in_their_original_order() -> None:
    # Room for two turns of 9-10 tokens besides the system prompt and the question.
    result = trim_history(HISTORY, 2 + 3 + 5 + 20, Relevance(recent_turns=0), words())
    assert result.messages == [SYS, *TURNS[1], *TURNS[3], HISTORY[-1]]
    assert result.strategy == "relevance" and result.dropped == [*TURNS[0], *TURNS[2]]


def test_relevance_keeps_the_recent_turns_first() -> None:
    result = trim_history(HISTORY, 2 + 3 + 5 + 20, "relevance", words())
    assert result.messages == [SYS, *TURNS[1], *TURNS[3], HISTORY[-1]]
    novel_last = [SYS, *TURNS[0], *TURNS[1], *TURNS[3], *TURNS[2], HISTORY[-1]]
    result = trim_history(novel_last, 2 + 3 + 5 + 20, "relevance", words())
    assert result.messages == [SYS, *TURNS[1], *TURNS[2], HISTORY[-1]]  # recent, then Paris


def test_relevance_fills_the_room_with_a_smaller_turn_when_a_better_one_does_not_fit() -> None:
    long_paris = [msg("user", "Paris weather " + "very " * 30), msg("assistant", "ok")]
    history = [SYS, *long_paris, *TURNS[2], HISTORY[-1]]
    result = trim_history(history, 2 + 3 + 5 + 12, Relevance(recent_turns=0), words())
    assert result.messages == [SYS, *TURNS[2], HISTORY[-1]]


class Recorder:
    """A summariser that records what it was given."""

    def __init__(self, text: str = "they talked") -> None:
        self.text = text
        self.calls: list[list[Message]] = []

    def __call__(self, messages: Sequence[Message]) -> str:
        self.calls.append(list(messages))
        return self.text


BUDGET = 2 + 3 + 5 + 10 + 10  # system, question, the last turn, room for a 10-token summary


def test_a_summary_replaces_the_dropped_turns_after_the_system_prompt() -> None:
    summarise = Recorder()
    strategy = Summarize(summarise, reserve_tokens=10)
    result = trim_history(HISTORY, BUDGET, strategy, words())
    summary = msg("system", SUMMARY_PREFIX + "they talked")
    assert result.messages == [SYS, summary, *TURNS[3], HISTORY[-1]]
    assert result.summary == summary and result.fallback is None
    assert summarise.calls == [[m for turn in TURNS[:3] for m in turn]]
    assert result.dropped == summarise.calls[0]
    assert result.tokens_after <= BUDGET and strategy.failures == 0


def test_an_earlier_summary_is_folded_into_the_next_one() -> None:
    summarise = Recorder()
    strategy = Summarize(summarise, reserve_tokens=10)
    first = trim_history(HISTORY, BUDGET, strategy, words())
    later = [*first.messages, msg("assistant", "probably"), msg("user", "and in Rome")]
    second = trim_history(later, BUDGET, strategy, words())
    assert summarise.calls[1] == [first.summary, *TURNS[3]]  # the old summary, then the turn
    assert second.messages == [SYS, second.summary, *later[-3:]]
    assert second.dropped == [first.summary, *TURNS[3]] and second.tokens_after <= BUDGET


def test_nothing_is_summarised_when_everything_fits() -> None:
    summarise = Recorder()
    result = trim_history(HISTORY, 1000, Summarize(summarise), words())
    assert result.messages == HISTORY and summarise.calls == [] and result.summary is None


def sliding(history: list[dict[str, str]]) -> list[Any]:
    return trim_history(history, BUDGET, tokenizer=words()).messages


def test_a_failing_summariser_falls_back_to_the_sliding_window_and_is_counted() -> None:
    def broken(messages: Sequence[Message]) -> str:
        raise RuntimeError("model down")

    strategy = Summarize(broken, reserve_tokens=10)
    result = trim_history(HISTORY, BUDGET, strategy, words())
    assert result.messages == sliding(HISTORY) and result.summary is None
    assert result.fallback == "RuntimeError: model down"
    assert strategy.failures == 1 and strategy.last_error == "RuntimeError: model down"


@pytest.mark.parametrize(("text", "error"), [
    (None, "TypeError: the summariser returned NoneType, not str"),
    ("far too " * 20, "ValueError: the summary needs 46 tokens; 12 were left"),
])
def test_a_summary_that_is_not_text_or_too_long_falls_back(text: Any, error: str) -> None:
    strategy = Summarize(lambda messages: text, reserve_tokens=10)
    result = trim_history(HISTORY, BUDGET, strategy, words())
    assert result.fallback == error and result.messages == sliding(HISTORY)
    assert strategy.failures == 1


@pytest.mark.anyio
async def test_an_async_summariser_works_through_atrim_history() -> None:
    seen: list[int] = []

    async def summarise(messages: Sequence[Message]) -> str:
        seen.append(len(messages))
        return "they talked"

    result = await atrim_history(HISTORY, BUDGET, Summarize(summarise, reserve_tokens=10),
                                 words())
    assert result.summary == msg("system", SUMMARY_PREFIX + "they talked") and seen == [6]


@pytest.mark.anyio
async def test_a_failing_async_summariser_falls_back() -> None:
    async def broken(messages: Sequence[Message]) -> str:
        raise TimeoutError("slow model")

    strategy = Summarize(broken, reserve_tokens=10)
    result = await atrim_history(HISTORY, BUDGET, strategy, words())
    assert result.messages == sliding(HISTORY) and strategy.failures == 1
    assert result.fallback == "TimeoutError: slow model"


@pytest.mark.anyio
async def test_sync_strategies_work_through_atrim_history_too() -> None:
    result = await atrim_history(HISTORY, BUDGET, "sliding_window", words())
    assert result.messages == sliding(HISTORY)


def test_an_async_summariser_in_the_sync_call_is_a_type_error() -> None:
    async def summarise(messages: Sequence[Message]) -> str:
        return "never"

    strategy = Summarize(summarise)
    with pytest.raises(TypeError, match="use atrim_history"):
        trim_history(HISTORY, BUDGET, strategy, words())
    assert strategy.failures == 0
