"""The shape every trimming strategy works on: pinned messages, droppable turns, the room left.

A strategy never decides what is pinned, so none can drop the system prompt or the message
being answered, and none can split a message: it only chooses whole *turns* to keep. A turn
starts at a user message and runs to the next one (the assistant's answer, tool calls and
their results stay with the question that caused them), which keeps what the template sees
well formed: templates that insist on user/assistant alternation (Llama 2, Mistral) never get
an orphaned answer at the start of the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from llm_guard_sdk.trimming.counting import TokenCounter
from llm_guard_sdk.trimming.messages import Message


@dataclass(frozen=True, slots=True)
class TrimInput:
    """A history prepared for a strategy.

    Attributes:
        messages: The whole history, oldest first.
        costs: Tokens of each message (content plus template overhead).
        pinned: Indexes always kept: every system message and the current turn (from the last
            user message to the end; the last message alone when there is no user message).
        turns: The droppable turns, oldest first, each a tuple of message indexes.
        room: Tokens left for turns once the pinned messages and the reply overhead are paid
            (negative when the pinned messages alone exceed the budget).
        counter: Counts any further message (a summary).
        max_tokens: The budget.
    """

    messages: Sequence[Message]
    costs: tuple[int, ...]
    pinned: frozenset[int]
    turns: tuple[tuple[int, ...], ...]
    room: int
    counter: TokenCounter
    max_tokens: int

    def cost(self, indexes: Iterable[int]) -> int:
        """Tokens of the messages at ``indexes``."""
        return sum(self.costs[i] for i in indexes)


@dataclass(frozen=True, slots=True)
class Plan:
    """A strategy's answer.

    Attributes:
        keep: The turns kept (indexes into :attr:`TrimInput.turns`); pinned messages are always
            kept besides.
        summary: Text of a summary message standing in for what was dropped, if any.
        unpin: Pinned messages the summary replaces (an earlier summary folded into this one).
        fallback: Why the strategy fell back to the sliding window (its callable failed), or None.
    """

    keep: frozenset[int]
    summary: str | None = None
    unpin: frozenset[int] = field(default_factory=frozenset)
    fallback: str | None = None


@runtime_checkable
class TrimStrategy(Protocol):
    """Chooses which turns to keep within ``view.room``; must not exceed it when it can help it."""

    name: str

    def plan(self, view: TrimInput) -> Plan:
        """The turns to keep (and optionally a summary of the others)."""
        ...


@runtime_checkable
class AsyncTrimStrategy(TrimStrategy, Protocol):
    """A strategy with an async path (an async summariser); ``atrim_history`` prefers it."""

    async def aplan(self, view: TrimInput) -> Plan:
        """:meth:`plan`, awaiting what it calls."""
        ...


def prepare(messages: Sequence[Message], max_tokens: int, counter: TokenCounter) -> TrimInput:
    """Split ``messages`` into pinned messages and droppable turns, and price them."""
    costs = tuple(counter.message(m) for m in messages)
    system = {i for i, m in enumerate(messages) if m["role"] == "system"}
    others = [i for i in range(len(messages)) if i not in system]
    users = [i for i in others if messages[i]["role"] == "user"]
    current_from = users[-1] if users else (others[-1] if others else len(messages))
    pinned = system | {i for i in others if i >= current_from}
    turns: list[list[int]] = []
    for i in others:
        if i >= current_from:
            break
        if not turns or messages[i]["role"] == "user":
            turns.append([])
        turns[-1].append(i)
    spent = (counter.reply_overhead if messages else 0) + sum(costs[i] for i in pinned)
    return TrimInput(messages, costs, frozenset(pinned), tuple(tuple(t) for t in turns),
                     max_tokens - spent, counter, max_tokens)
