"""Context trimming: fit a conversation into a token budget (see docs/context.md).

``trim_history(messages, max_tokens)`` keeps the system prompt(s) and the most recent turns;
``strategy="relevance"`` keeps the turns most similar to the latest question instead, and
:class:`Summarize` replaces dropped turns by a summary from your own callable. Counts are exact
with the engine's tokenizer and a conservative upper bound without. Framework-free: the
WebSocket chat helpers use it to cap each session's history.
"""

from llm_guard_sdk.errors import InvalidHistoryError
from llm_guard_sdk.trimming.counting import (
    MESSAGE_OVERHEAD,
    REPLY_OVERHEAD,
    TokenCounter,
    Tokenizer,
    TokenizerLike,
)
from llm_guard_sdk.trimming.messages import ROLES, Message, parse_history
from llm_guard_sdk.trimming.plan import AsyncTrimStrategy, Plan, TrimInput, TrimStrategy
from llm_guard_sdk.trimming.stats import ContextStats
from llm_guard_sdk.trimming.strategies import Relevance, SlidingWindow, tfidf_similarities
from llm_guard_sdk.trimming.summary import SUMMARY_PREFIX, Summarize, Summarizer
from llm_guard_sdk.trimming.trim import (
    StrategyName,
    TrimResult,
    atrim_history,
    resolve_strategy,
    trim_history,
)

__all__ = [
    "MESSAGE_OVERHEAD",
    "REPLY_OVERHEAD",
    "ROLES",
    "SUMMARY_PREFIX",
    "AsyncTrimStrategy",
    "ContextStats",
    "InvalidHistoryError",
    "Message",
    "Plan",
    "Relevance",
    "SlidingWindow",
    "StrategyName",
    "Summarize",
    "Summarizer",
    "TokenCounter",
    "Tokenizer",
    "TokenizerLike",
    "TrimInput",
    "TrimResult",
    "TrimStrategy",
    "atrim_history",
    "parse_history",
    "resolve_strategy",
    "tfidf_similarities",
    "trim_history",
]
