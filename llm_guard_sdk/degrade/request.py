"""What an engine asks the degrade hook, what the hook answers, and the built-in policy.

Engine-neutral on purpose: the in-process vLLM integration and a remote (OpenAI-compatible)
engine build the same :class:`DegradeRequest` from their own request and apply the
:class:`DegradeDecision` they get back, so one user hook serves every engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from llm_guard_sdk.policy import Level

__all__ = ["DegradeDecision", "DegradeHook", "DegradeRequest", "headroom", "headroom_cap"]

Messages = Sequence[Mapping[str, str]]
Prompt = str | Sequence[int]


@dataclass(frozen=True, slots=True)
class DegradeRequest:
    """One new engine request, as the degrade hook sees it.

    Attributes:
        max_tokens: The completion budget asked for; None: the engine's default.
        prompt: The prompt (text or token ids), when the request has one.
        messages: The chat history, when the request has one.
        model: The model (or generator) name the request would go to, when known.
        backend: Which engine asks (``"vllm"``, ``"openai"``, ...): for hooks and logs.
        level: The pressure level now (the guard's, or an engine's own such as the KV
            cache's, whichever is higher); filled in by :class:`~llm_guard_sdk.degrade.Degrader`.
        headroom: 1.0 where degrading starts down to 0.0 at the shed threshold (see
            :func:`headroom`); filled in by the degrader.
    """

    max_tokens: int | None = None
    prompt: Prompt | None = None
    messages: Messages | None = None
    model: str | None = None
    backend: str = "app"
    level: Level = Level.NORMAL
    headroom: float = 1.0


@dataclass(frozen=True, slots=True)
class DegradeDecision:
    """What to change; a field left None is kept as asked.

    Attributes:
        max_tokens: A lower completion budget (>= 1); one not below the asked one is ignored.
        model: Another model or generator to send the request to (a fallback).
        messages: A shorter chat history to send instead.
        prompt: A shorter prompt to send instead.
    """

    max_tokens: int | None = None
    model: str | None = None
    messages: Messages | None = None
    prompt: Prompt | None = None


DegradeHook = Callable[[DegradeRequest], DegradeDecision | None]
"""A user hook: called per new engine request at or above the degrade level; None: no change.
It may raise: the error is counted and the request proceeds undegraded."""


def headroom(pressure: float, start: float, shed: float) -> float:
    """How much room is left between where degrading starts and the shed threshold.

    ``clamp((shed - pressure) / (shed - start), 0, 1)``: 1.0 at ``start`` (the degrade level's
    threshold), 0.0 at ``shed`` and above.
    """
    if shed <= start:
        return 0.0 if pressure >= shed else 1.0
    return min(1.0, max(0.0, (shed - pressure) / (shed - start)))


def headroom_cap(max_tokens: int, room: float, min_tokens: int) -> int:
    """The built-in cap: ``max(min_tokens, ceil(max_tokens * room))``, never above the ask."""
    return min(max_tokens, max(min_tokens, math.ceil(max_tokens * room)))
