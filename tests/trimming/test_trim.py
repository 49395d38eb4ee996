"""trim_history's boundaries and the sliding window, counted with a word tokenizer.

``Words`` makes every count visible in the test: a message costs its word count plus
``MSG`` (1), a conversation adds ``REPLY`` (2) once.
"""

from __future__ import annotations

from typing import Any

import pytest

from llm_guard_sdk.errors import InvalidRequestError
from llm_guard_sdk.trimming import (
    InvalidHistoryError,
    Plan,
    TokenCounter,
    TrimInput,
    parse_history,
    trim_history,
)


class Words:
    """A tokenizer whose tokens are the whitespace-separated words."""

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        self.calls += 1
        return [len(w) for w in text.split()]


def counter() -> TokenCounter:
    return TokenCounter(Words(), message_overhead=1, reply_overhead=2)


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


SYS = msg("system", "be brief")          # 3
U1, A1 = msg("user", "one two"), msg("assistant", "three four")   # 3 + 3
U2 = msg("user", "five")                 # 2
HISTORY = [SYS, U1, A1, U2]              # 2 + 3 + 3 + 3 + 2 = 13


def test_an_exact_fit_keeps_everything() -> None:
    result = trim_history(HISTORY, 13, tokenizer=counter())
    assert result.messages == HISTORY and result.dropped == []
    assert (result.tokens_before, result.tokens_after, result.trimmed_tokens) == (13, 13, 0)
    assert not result.over_budget and not result.trimmed and result.exact


def test_one_token_over_drops_the_oldest_turn_whole() -> None:
    result = trim_history(HISTORY, 12, tokenizer=counter())
    assert result.messages == [SYS, U2]
    assert result.dropped == [U1, A1]
    assert (result.tokens_before, result.tokens_after, result.trimmed_tokens) == (13, 7, 6)
    assert not result.over_budget and result.strategy == "sliding_window"


def test_a_turn_is_never_split_even_when_its_question_alone_would_fit() -> None:
    # 10 leaves 3 tokens for the turn: the user message (3) would fit, the pair (6) does not.
    result = trim_history(HISTORY, 10, tokenizer=counter())
    assert result.messages == [SYS, U2]


def test_the_window_is_the_most_recent_unbroken_stretch() -> None:
    big = msg("user", "a b c d e f g h")                    # 9
    small = msg("user", "x")                                 # 2
    history = [small, big, msg("assistant", "ok"), U2]       # turns: [small], [big, ok], current
    # Room for [small] (2) but not [big, ok] (11): a window never skips to an older turn.
    result = trim_history(history, 2 + 2 + 2 + 3, tokenizer=counter())
    assert result.messages == [U2]


def test_system_prompts_are_kept_in_place_and_the_latest_message_always() -> None:
    mid = msg("system", "now answer in French")
    history = [SYS, U1, A1, mid, msg("user", "six seven"), msg("assistant", "eight"), U2]
    result = trim_history(history, 2 + 3 + 5 + 2, tokenizer=counter())
    assert result.messages == [SYS, mid, U2]


def test_a_leading_assistant_greeting_is_its_own_turn() -> None:
    hello = msg("assistant", "hello there")
    result = trim_history([SYS, hello, U1, A1, U2], 13, tokenizer=counter())
    assert result.messages == [SYS, U1, A1, U2] and result.dropped == [hello]


def test_a_single_message_over_the_budget_is_kept_alone_and_reported() -> None:
    huge = msg("user", " ".join(["w"] * 50))
    result = trim_history([SYS, U1, A1, huge], 20, tokenizer=counter())
    assert result.messages == [SYS, huge] and result.dropped == [U1, A1]
    assert result.over_budget and result.tokens_after == 2 + 3 + 51


def test_the_current_turn_runs_from_the_last_user_message() -> None:
    call, output = msg("assistant", "calling"), msg("tool", "result text")
    history = [U1, A1, U2, call, output]
    result = trim_history(history, 2 + 2 + 2 + 3, tokenizer=counter())
    assert result.messages == [U2, call, output]


def test_empty_and_system_only_histories() -> None:
    empty = trim_history([], 5)
    assert (empty.messages, empty.dropped, empty.tokens_before, empty.tokens_after) == (
        [], [], 0, 0)
    assert not empty.over_budget
    only = trim_history([SYS], 100, tokenizer=counter())
    assert only.messages == [SYS] and only.tokens_after == 5


def test_the_input_is_not_modified() -> None:
    history = list(HISTORY)
    trim_history(history, 7, tokenizer=counter())
    assert history == HISTORY


def test_the_estimate_counts_utf8_bytes_plus_the_template_overhead() -> None:
    estimate = TokenCounter()
    assert not estimate.exact
    assert estimate.message(msg("user", "héllo")) == 6 + estimate.message_overhead
    assert estimate.total([msg("user", "")]) == estimate.message_overhead + estimate.reply_overhead
    assert TokenCounter(bytes_per_token=4).text_tokens("abcde") == 2  # rounded up


def test_tokenizer_forms_a_callable_and_an_encoding_with_ids() -> None:
    class Encoding:
        ids = (1, 2, 3)

    assert TokenCounter(lambda text: [0] * len(text)).text_tokens("abcd") == 4
    assert TokenCounter(type("T", (), {"encode": lambda self, t: Encoding()})()).text_tokens(
        "x") == 3
    with pytest.raises(TypeError, match="encode"):
        TokenCounter(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected token ids"):
        TokenCounter(lambda text: "nope").text_tokens("x")


@pytest.mark.parametrize(("history", "error"), [
    ({"role": "user"}, "history must be a list of messages, got dict"),
    ("hello", "history must be a list of messages, got str"),
    ([msg("user", "ok"), "hi"], "history[1] must be an object with role and content, got str"),
    ([{"role": "bot", "content": "x"}], "history[0].role must be one of system, user, assistant"),
    ([{"content": "x"}], "history[0].role must be one of"),
    ([{"role": "user", "content": None}], "history[0].content must be a string, got NoneType"),
    ([{"role": "user", "content": ["parts"]}], "history[0].content must be a string, got list"),
])
def test_a_history_that_is_not_a_list_of_messages_is_a_400(history: Any, error: str) -> None:
    with pytest.raises(InvalidHistoryError) as caught:
        parse_history(history)
    assert str(caught.value).startswith(error)
    assert isinstance(caught.value, InvalidRequestError) and isinstance(caught.value, ValueError)
    assert caught.value.status == 400
    assert caught.value.document() == {"error": str(caught.value), "reason": "invalid_history"}
    with pytest.raises(InvalidHistoryError):
        trim_history(history, 100)


def test_a_long_bad_role_is_shortened_in_the_error() -> None:
    with pytest.raises(InvalidHistoryError) as caught:
        parse_history([{"role": "x" * 500, "content": ""}])
    assert len(str(caught.value)) < 120


@pytest.mark.parametrize("budget", [0, -1, 1.5, True])
def test_the_budget_must_be_a_positive_int(budget: Any) -> None:
    with pytest.raises(ValueError, match="max_tokens must be an int >= 1"):
        trim_history(HISTORY, budget)


def test_unknown_strategies_and_plans_outside_the_history_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown trimming strategy 'newest'"):
        trim_history(HISTORY, 10, "newest")  # type: ignore[arg-type]

    class Broken:
        name = "broken"

        def plan(self, view: TrimInput) -> Plan:
            return Plan(frozenset({len(view.turns) + 3}))

    with pytest.raises(ValueError, match="strategy 'broken' kept turns"):
        trim_history(HISTORY, 10, Broken())
