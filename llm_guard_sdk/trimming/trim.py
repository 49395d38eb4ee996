"""``trim_history``: fit a conversation into a token budget, and say what it cost.

The policy, whatever the strategy:

* the system messages and the current turn (the latest user message and anything after it)
  are always kept; whole turns before it are kept or dropped, never parts of a message;
* when the kept-always messages alone exceed the budget (one huge prompt), every other turn is
  dropped, the result keeps just them and says ``over_budget=True``: trimming cannot shorten a
  message without changing what it says, so the caller decides (the chat helpers refuse the
  prompt; an HTTP endpoint answers 400);
* the result lists what was dropped and the token counts before and after, so callers can
  report trimmed tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, Literal

from llm_guard_sdk.trimming.counting import TokenCounter, TokenizerLike, as_counter
from llm_guard_sdk.trimming.messages import M, check_history
from llm_guard_sdk.trimming.plan import AsyncTrimStrategy, Plan, TrimInput, TrimStrategy, prepare
from llm_guard_sdk.trimming.strategies import Relevance, SlidingWindow
from llm_guard_sdk.trimming.summary import SUMMARY_PREFIX

StrategyName = Literal["sliding_window", "relevance"]


@dataclass(frozen=True, slots=True)
class TrimResult(Generic[M]):
    """What :func:`trim_history` kept and dropped.

    Attributes:
        messages: The history to send, in its original order (plus a summary, if any).
        dropped: The messages left out (an earlier summary folded into a new one included).
        tokens_before: Tokens of the whole history.
        tokens_after: Tokens of :attr:`messages`.
        max_tokens: The budget.
        exact: Counted with a tokenizer (else the conservative byte estimate).
        strategy: The strategy's name.
        summary: The summary message added, or None.
        fallback: Why the strategy fell back to the sliding window, or None.
    """

    messages: list[M | dict[str, str]]
    dropped: list[M]
    tokens_before: int
    tokens_after: int
    max_tokens: int
    exact: bool
    strategy: str
    summary: dict[str, str] | None = None
    fallback: str | None = None

    @property
    def over_budget(self) -> bool:
        """The kept-always messages alone exceed the budget (see the module docstring)."""
        return self.tokens_after > self.max_tokens

    @property
    def trimmed_tokens(self) -> int:
        """Tokens saved: before minus after (a summary's own tokens are subtracted)."""
        return max(0, self.tokens_before - self.tokens_after)

    @property
    def trimmed(self) -> bool:
        """Anything was dropped."""
        return bool(self.dropped)


def resolve_strategy(strategy: StrategyName | TrimStrategy) -> TrimStrategy:
    """The strategy object for a name, or the object itself."""
    if strategy == "sliding_window":
        return SlidingWindow()
    if strategy == "relevance":
        return Relevance()
    if isinstance(strategy, TrimStrategy):
        return strategy
    raise ValueError(f"unknown trimming strategy {strategy!r}: expected 'sliding_window', "
                     "'relevance' or an object with name and plan(view)")


def _setup(messages: Sequence[M], max_tokens: int,
           tokenizer: TokenizerLike | TokenCounter | None) -> TrimInput:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be an int >= 1, got {max_tokens!r}")
    return prepare(check_history(messages), max_tokens, as_counter(tokenizer))


def trim_history(messages: Sequence[M], max_tokens: int,
                 strategy: StrategyName | TrimStrategy = "sliding_window",
                 tokenizer: TokenizerLike | TokenCounter | None = None) -> TrimResult[M]:
    """Keep the system prompt(s) and as much recent conversation as fits ``max_tokens``.

    Args:
        messages: ``{"role", "content"}`` mappings, oldest first (not modified).
        max_tokens: The budget, counting the chat template's overhead.
        strategy: ``"sliding_window"`` (most recent turns), ``"relevance"`` (turns most
            similar to the latest user message) or a :class:`TrimStrategy` (e.g.
            :class:`Summarize` with a sync summariser).
        tokenizer: The engine's tokenizer for exact counts, a callable ``text -> ids``, a
            :class:`TokenCounter`, or None for the conservative estimate (1 token per byte).

    Raises:
        InvalidHistoryError: ``messages`` is not a list of messages (a 400 for a client).
        ValueError: ``max_tokens`` < 1 or an unknown strategy name.
        TypeError: A strategy needs ``await`` (an async summariser): use :func:`atrim_history`.
    """
    view = _setup(messages, max_tokens, tokenizer)
    chosen = resolve_strategy(strategy)
    return _result(messages, view, chosen.plan(view) if view.turns else Plan(frozenset()),
                   chosen)


async def atrim_history(messages: Sequence[M], max_tokens: int,
                        strategy: StrategyName | TrimStrategy = "sliding_window",
                        tokenizer: TokenizerLike | TokenCounter | None = None) -> TrimResult[M]:
    """:func:`trim_history` for async strategies (an async summariser); same arguments."""
    view = _setup(messages, max_tokens, tokenizer)
    chosen = resolve_strategy(strategy)
    if not view.turns:
        plan = Plan(frozenset())
    elif isinstance(chosen, AsyncTrimStrategy):
        plan = await chosen.aplan(view)
    else:
        plan = chosen.plan(view)
    return _result(messages, view, plan, chosen)


def _result(messages: Sequence[M], view: TrimInput, plan: Plan,
            strategy: TrimStrategy) -> TrimResult[M]:
    """Apply ``plan``: kept messages in order, the summary where the dropped turns were."""
    if not plan.keep <= set(range(len(view.turns))) or not plan.unpin <= view.pinned:
        raise ValueError(f"strategy {strategy.name!r} kept turns or unpinned messages that "
                         "do not exist")
    keep = (view.pinned - plan.unpin) | {m for t in plan.keep for m in view.turns[t]}
    kept: list[M | dict[str, str]] = [messages[i] for i in sorted(keep)]
    summary = None
    if plan.summary is not None:
        summary = {"role": "system", "content": SUMMARY_PREFIX + plan.summary}
        first_turn = min((i for i in keep if messages[i]["role"] != "system"), default=None)
        at = len(kept) if first_turn is None else sorted(keep).index(first_turn)
        kept.insert(at, summary)
    counter = view.counter
    return TrimResult(
        messages=kept,
        dropped=[m for i, m in enumerate(messages) if i not in keep],
        tokens_before=counter.total(messages),
        tokens_after=counter.total(kept),
        max_tokens=view.max_tokens,
        exact=counter.exact, strategy=strategy.name, summary=summary, fallback=plan.fallback)
