"""The chat helpers' history budget: trim a session's conversation before each generation.

Without it a WebSocket chat's ``history`` grows with every turn for as long as the client
stays, in memory the guard can only free by evicting the whole session. With it, the
conversation handed to the model is cut to ``max_history_tokens`` by
:func:`~llm_guard_sdk.trimming.atrim_history` (system prompt and latest message always kept,
whole turns dropped), and what was cut is counted in the ``"context"`` status section.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from llm_guard_sdk.trimming import (
    ContextStats,
    StrategyName,
    TokenCounter,
    TokenizerLike,
    TrimResult,
    TrimStrategy,
    atrim_history,
    parse_history,
    resolve_strategy,
)
from llm_guard_sdk.trimming.counting import RememberingCounter, as_counter

MAX_REASON_BYTES: Final = 123  # RFC 6455: a close frame's reason fits in 123 bytes


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """How the chat helpers trim a session's history (``websocket_chat(..., context=)``).

    Attributes:
        max_tokens: The budget; None takes ``ChatSettings.max_history_tokens``
            (``LLM_GUARD_MAX_HISTORY_TOKENS``); 0 turns trimming off.
        strategy: ``"sliding_window"``, ``"relevance"`` or a strategy object
            (:class:`~llm_guard_sdk.trimming.Summarize`, sync or async summariser).
        tokenizer: The engine's tokenizer (vLLM: ``engine.get_tokenizer()``) for exact
            counts; None for the conservative byte estimate.
    """

    max_tokens: int | None = None
    strategy: StrategyName | TrimStrategy = "sliding_window"
    tokenizer: TokenizerLike | TokenCounter | None = None

    def __post_init__(self) -> None:
        """Check the budget and strategy here, where the app is built, not at a chat's turn."""
        if self.max_tokens is not None:
            _check_budget(self.max_tokens)
        resolve_strategy(self.strategy)
        as_counter(self.tokenizer)


class HistoryTrimmer:
    """One session's trimming: its budget, strategy, remembered counts and totals."""

    def __init__(self, max_tokens: int, budget: ContextBudget, stats: ContextStats) -> None:
        self.max_tokens = _check_budget(max_tokens)
        self.strategy = resolve_strategy(budget.strategy)
        self.counter = RememberingCounter(as_counter(budget.tokenizer))
        self.stats = stats
        self.trimmed_tokens = 0
        self.trimmed_messages = 0

    async def trim(self, history: list[dict[str, str]]) -> TrimResult[dict[str, str]] | None:
        """Cut ``history`` in place to the budget; None when trimming is off.

        When the result is over budget (the latest message alone exceeds it) the history is
        left as it was, for the caller to refuse the prompt.
        """
        if self.max_tokens == 0:
            return None
        result = await atrim_history(history, self.max_tokens, self.strategy, self.counter)
        self.stats.record(result)
        if not result.over_budget:
            history[:] = result.messages
            self.trimmed_tokens += result.trimmed_tokens
            self.trimmed_messages += len(result.dropped)
        self.counter.keep_only(history)
        return result

    def replace(self, history: list[dict[str, str]], value: object) -> None:
        """Replace ``history`` by a client-sent one (copies of its string fields).

        Raises:
            InvalidHistoryError: ``value`` is not a list of messages (counted).
        """
        try:
            messages = parse_history(value)
        except ValueError:
            self.stats.record_invalid_history()
            raise
        history[:] = [_strings(m) for m in messages]
        self.counter.keep_only(history)


def _check_budget(max_tokens: object) -> int:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise ValueError(f"max_tokens must be an int >= 0 (0: off), got {max_tokens!r}")
    return max_tokens


def _strings(message: Mapping[str, Any]) -> dict[str, str]:
    """A message's string fields (role, content, name, tool_call_id ...), copied."""
    return {key: value for key, value in message.items() if isinstance(value, str)}


def close_reason(text: str) -> str:
    """``text`` cut to fit a WebSocket close frame, on a character boundary."""
    data = text.encode()
    if len(data) <= MAX_REASON_BYTES:
        return text
    return data[:MAX_REASON_BYTES - 3].decode(errors="ignore") + "..."
