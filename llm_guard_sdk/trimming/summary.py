"""The summarisation hook: dropped turns replaced by one summary message from a user callable.

Summarising needs a model, and a model call can fail or hang; trimming must not. So the
callable's failure (an exception, a non-string, a summary too long to fit) falls back to the
sliding window for that turn, is counted (:attr:`Summarize.failures`) and logged at most once
per interval, and the conversation goes on. The summary is a system message starting with
:data:`SUMMARY_PREFIX`; the next time the history overflows, that earlier summary is folded
into the new one with the turns dropped since, so summaries do not pile up.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from llm_guard_sdk.ratelog import RateLimitedLog
from llm_guard_sdk.trimming.messages import Message
from llm_guard_sdk.trimming.plan import Plan, TrimInput
from llm_guard_sdk.trimming.strategies import newest_that_fit

SUMMARY_PREFIX: Final = "Summary of the earlier conversation: "
"""How a summary message starts; marks it for folding into the next summary."""

Summarizer = Callable[[Sequence[Message]], str | Awaitable[str]]
"""Takes the messages to fold (an earlier summary first, if any), returns the summary text."""

logger = logging.getLogger("llm_guard_sdk.trimming")


@dataclass(frozen=True, slots=True)
class _Fold:
    keep: list[int]           # turns kept beside the summary
    folded: list[Message]     # what the summariser is asked to summarise
    unpin: frozenset[int]     # earlier summaries it replaces
    room: int                 # tokens for the kept turns and the summary


class Summarize:
    """Replace the turns that do not fit by a summary of them.

    Args:
        summarizer: ``messages -> text``, sync or async. Only :func:`atrim_history` (and the
            chat helpers, which use it) can await an async one; :func:`trim_history` raises
            TypeError for it, since blocking on a coroutine there would stall the event loop.
        reserve_tokens: Room kept free for the summary: the window of recent turns is chosen
            within ``room - reserve_tokens``.
    """

    name = "summarize"

    def __init__(self, summarizer: Summarizer, *, reserve_tokens: int = 256) -> None:
        if reserve_tokens < 0:
            raise ValueError("reserve_tokens must be >= 0")
        self.summarizer = summarizer
        self.reserve_tokens = reserve_tokens
        self.failures = 0
        self.last_error = ""
        self._log = RateLimitedLog(logger, "summariser failures", interval=60.0)

    def plan(self, view: TrimInput) -> Plan:
        """Summarise with a sync summariser; fall back to the sliding window when it fails."""
        fold = self._fold(view)
        if fold is None:
            return Plan(frozenset(newest_that_fit(view, view.room)))
        try:
            text = self.summarizer(fold.folded)
        except Exception as exc:  # the user's callable: any failure falls back
            return self._fallback(view, exc)
        if inspect.isawaitable(text):
            if inspect.iscoroutine(text):
                text.close()  # never awaited: close it rather than leak a warning
            raise TypeError("the summariser is async: use atrim_history")
        return self._accept(view, fold, text)

    async def aplan(self, view: TrimInput) -> Plan:
        """Summarise with a sync or async summariser; fall back when it fails."""
        fold = self._fold(view)
        if fold is None:
            return Plan(frozenset(newest_that_fit(view, view.room)))
        try:
            text = self.summarizer(fold.folded)
            if inspect.isawaitable(text):
                text = await text
        except Exception as exc:  # the user's callable: any failure falls back
            return self._fallback(view, exc)
        return self._accept(view, fold, text)

    def _fold(self, view: TrimInput) -> _Fold | None:
        """What to summarise, or None when every turn fits and there is nothing to do."""
        if len(newest_that_fit(view, view.room)) == len(view.turns):
            return None
        earlier = sorted(i for i in view.pinned if view.messages[i]["role"] == "system"
                         and str(view.messages[i]["content"]).startswith(SUMMARY_PREFIX))
        room = view.room + view.cost(earlier)
        keep = newest_that_fit(view, room - self.reserve_tokens)
        dropped = [m for t in range(len(view.turns)) if t not in keep for m in view.turns[t]]
        folded = [view.messages[i] for i in sorted([*earlier, *dropped])]
        return _Fold(keep, folded, frozenset(earlier), room)

    def _accept(self, view: TrimInput, fold: _Fold, text: object) -> Plan:
        if not isinstance(text, str):
            return self._fallback(view, TypeError(
                f"the summariser returned {type(text).__name__}, not str"))
        cost = view.counter.message({"role": "system", "content": SUMMARY_PREFIX + text})
        kept_cost = sum(view.cost(view.turns[t]) for t in fold.keep)
        if cost + kept_cost > fold.room:
            return self._fallback(view, ValueError(
                f"the summary needs {cost} tokens; {fold.room - kept_cost} were left"))
        return Plan(frozenset(fold.keep), summary=text, unpin=fold.unpin)

    def _fallback(self, view: TrimInput, exc: BaseException) -> Plan:
        self.failures += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self._log.event("failed", "summariser failed (%s); trimmed with the sliding window",
                        self.last_error)
        return Plan(frozenset(newest_that_fit(view, view.room)), fallback=self.last_error)
