"""The chat helpers' history budget: trim a session's conversation before each generation.

Without it a WebSocket chat's ``history`` grows with every turn for as long as the client
stays, in memory the guard can only free by evicting the whole session. With it, the
conversation handed to the model is cut to ``max_history_tokens`` by
:func:`~llm_guard_sdk.trimming.atrim_history` (system prompt and latest message always kept,
whole turns dropped), and what was cut is counted in the ``"context"`` status section.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from llm_guard_sdk.errors import BackendError, InvalidRequestError
from llm_guard_sdk.ratelog import RateLimitedLog
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

_log = RateLimitedLog(logging.getLogger("llm_guard_sdk.adapters.chat"), "trimming failures",
                      interval=60.0)


class HistoryTooLongError(InvalidRequestError):
    """The prompt alone (with the system prompt) is over the history budget: a 400."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="history_too_long")


class TrimFailedError(BackendError):
    """The history could not be trimmed (the strategy or tokenizer raised): a 500."""


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

        Raises:
            HistoryTooLongError: The latest message (with the system prompt) alone exceeds
                the budget; ``history`` is left as it was, for the caller to refuse the prompt.
            TrimFailedError: The strategy or tokenizer raised (counted and logged): the app's
                chat must not die of it, so the caller answers an error instead.
        """
        if self.max_tokens == 0:
            return None
        try:
            result = await atrim_history(history, self.max_tokens, self.strategy, self.counter)
        except Exception as exc:  # the app's strategy or tokenizer
            self.stats.record_error(exc)
            _log.event("failed", "trimming a chat history failed: %s: %s",
                       type(exc).__name__, exc)
            raise TrimFailedError("the conversation history could not be trimmed") from exc
        self.stats.record(result)
        if result.over_budget:
            raise HistoryTooLongError(
                f"the prompt needs {result.tokens_after} tokens with the system prompt; the "
                f"history budget is {result.max_tokens}")
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
