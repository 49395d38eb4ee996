"""The ``"degrade"`` extension: under pressure, new engine requests ask for less.

At the degrade level (``LLM_GUARD_DEGRADE``, warn by default) every new engine request goes
through a hook that may cap ``max_tokens``, switch to a fallback model or shorten the history
(:mod:`llm_guard_sdk.degrade.request`). Without a user hook the built-in
:class:`HeadroomPolicy` caps ``max_tokens`` in proportion to the headroom left before the shed
threshold. Each change is counted by kind in the ``degraded`` status section. Nothing here
raises into the app: a hook that raises or answers nonsense is counted and logged
(rate-limited), and the request goes on as asked.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

from llm_guard_sdk.config import degrade_level
from llm_guard_sdk.degrade.request import (
    DegradeDecision,
    DegradeHook,
    DegradeRequest,
    headroom,
    headroom_cap,
)
from llm_guard_sdk.policy import Level
from llm_guard_sdk.ratelog import RateLimitedLog
from llm_guard_sdk.settings import COUNT, Rule, Settings

__all__ = ["DEGRADE_KINDS", "DegradeSettings", "Degrader", "HeadroomPolicy", "degrade_level"]

logger = logging.getLogger("llm_guard_sdk")

DEGRADE_KINDS = ("max_tokens", "model", "history")
"""The kinds of change counted in the ``degraded`` status section."""
_LEVELS = {"normal": Level.NORMAL, "warn": Level.WARN, "evict": Level.EVICT}


@dataclass(frozen=True, slots=True)
class DegradeSettings(Settings):
    """Settings of the built-in policy, from keyword arguments or ``LLM_GUARD_DEGRADE_*``.

    The switch itself, ``LLM_GUARD_DEGRADE``, is a core setting (``GuardConfig.degrade``) so the
    guard knows to load the extension without importing it.

    Attributes:
        min_tokens: The built-in cap never goes below this (``LLM_GUARD_DEGRADE_MIN_TOKENS``).
    """

    ENV_PREFIX: ClassVar[str] = "LLM_GUARD_DEGRADE_"
    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({
        "min_tokens": Rule(COUNT, "expected an integer >= 1, e.g. 16"),
    })

    min_tokens: int = 16


class HeadroomPolicy:
    """The built-in hook: ``max_tokens`` capped in proportion to the headroom left.

    ``cap = max(min_tokens, ceil(max_tokens * headroom))`` (never above the ask), where
    ``headroom = clamp((shed_at - pressure) / (shed_at - start), 0, 1)`` and ``start`` is the
    degrade level's threshold. A request without ``max_tokens`` is left alone.
    """

    def __init__(self, min_tokens: int = 16) -> None:
        self.min_tokens = min_tokens

    def __call__(self, request: DegradeRequest) -> DegradeDecision | None:
        """Cap ``max_tokens`` by the request's headroom."""
        if request.max_tokens is None:
            return None
        return DegradeDecision(max_tokens=headroom_cap(request.max_tokens, request.headroom,
                                                       self.min_tokens))


class Degrader:
    """The guard extension ``"degrade"``: runs the hook and counts what it changed.

    Args:
        hook: The user hook; :class:`HeadroomPolicy` (``settings.min_tokens``) when None.
        level: The lowest level that degrades (``"normal"``, ``"warn"``, ``"evict"``); the
            guard's ``degrade`` setting when None, ``warn`` if that is off.
        settings: :class:`DegradeSettings` from the environment when None.
    """

    name = "degrade"

    def __init__(self, hook: DegradeHook | None = None, *, level: str | None = None,
                 settings: DegradeSettings | None = None) -> None:
        self.settings = settings if settings is not None else DegradeSettings()
        self.hook: DegradeHook = hook if hook is not None else HeadroomPolicy(
            self.settings.min_tokens)
        self._level_name = degrade_level(level) if level is not None else None
        self.level = Level.WARN
        self.guard: Any = None
        self.degraded: dict[str, int] = dict.fromkeys(DEGRADE_KINDS, 0)
        self.considered_total = 0
        self.hook_errors_total = 0
        self._errors_log = RateLimitedLog(logger, "degrade hook errors", interval=30.0)

    @classmethod
    def of(cls, guard: Any) -> Degrader | None:
        """The guard's degrader, or None when the extension is not enabled."""
        found = guard.extension(cls.name) if guard is not None else None
        return found if isinstance(found, Degrader) else None

    def setup(self, guard: Any) -> None:
        """Take the level (argument, else ``guard.config.degrade``) and serve ``degraded``."""
        name = self._level_name or getattr(guard.config, "degrade", None) or "warn"
        self.level = _LEVELS[name]
        self.guard = guard
        guard.add_status_section("degraded", self.status)

    def apply(self, request: DegradeRequest, *, pressure: float | None = None,
              level: Level = Level.NORMAL) -> DegradeRequest:
        """The request to send: ``request`` as degraded by the hook, or unchanged.

        ``pressure`` and ``level`` are an engine's own (its KV cache); the higher of them and
        the guard's decides. Never raises.
        """
        try:
            return self._apply(request, pressure, level)
        except Exception as exc:  # a bug here must not fail the request either
            self._hook_failed(request, exc)
            return request

    def _apply(self, request: DegradeRequest, pressure: float | None,
               level: Level) -> DegradeRequest:
        guard = self.guard
        if guard is None:
            return request
        thresholds = guard.policy.thresholds
        worst = max(float(guard.sampler.pressure), pressure or 0.0)
        level = max(guard.policy.level, level, _level_of(pressure or 0.0, thresholds))
        if level < self.level:
            return request
        self.considered_total += 1
        asked = dataclasses.replace(request, level=level, headroom=headroom(
            worst, thresholds.of(self.level), thresholds.shed))
        try:
            decision = self.hook(asked)
            changes = _changes(asked, decision)
        except Exception as exc:
            self._hook_failed(request, exc)
            return request
        for kind in {_KIND[field] for field in changes}:
            self.degraded[kind] += 1
        return dataclasses.replace(asked, **changes) if changes else asked

    def _hook_failed(self, request: DegradeRequest, exc: Exception) -> None:
        self.hook_errors_total += 1
        self._errors_log.event(type(exc).__name__, "llm-guard degrade hook failed (backend %s, "
                               "%s: %s); the request proceeds undegraded", request.backend,
                               type(exc).__name__, str(exc)[:200])

    def status(self) -> dict[str, int]:
        """The ``degraded`` section: requests changed by kind, hook errors, requests considered."""
        return {**self.degraded, "hook_errors": self.hook_errors_total,
                "considered": self.considered_total}


_KIND = {"max_tokens": "max_tokens", "model": "model", "messages": "history",
         "prompt": "history"}


def _level_of(pressure: float, thresholds: Any) -> Level:
    for level in (Level.SHED, Level.EVICT, Level.WARN):
        if pressure >= thresholds.of(level):
            return level
    return Level.NORMAL


def _changes(request: DegradeRequest, decision: object) -> dict[str, Any]:
    """The fields the decision really changes; a malformed decision raises TypeError."""
    if decision is None:
        return {}
    if not isinstance(decision, DegradeDecision):
        raise TypeError(f"a degrade hook returns a DegradeDecision or None, not "
                        f"{type(decision).__name__}")
    changes: dict[str, Any] = {}
    cap = decision.max_tokens
    if cap is not None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise TypeError(f"max_tokens must be an integer >= 1, not {cap!r}")
        if request.max_tokens is None or cap < request.max_tokens:
            changes["max_tokens"] = cap
    if decision.model is not None:
        if not isinstance(decision.model, str) or not decision.model:
            raise TypeError(f"model must be a non-empty string, not {decision.model!r}")
        if decision.model != request.model:
            changes["model"] = decision.model
    if decision.messages is not None:
        messages = decision.messages
        if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not all(
                isinstance(m, Mapping) for m in messages):
            raise TypeError("messages must be a sequence of mappings")
        if list(messages) != list(request.messages or ()):
            changes["messages"] = list(messages)
    if decision.prompt is not None:
        prompt = decision.prompt
        if not isinstance(prompt, str) and not (isinstance(prompt, Sequence) and all(
                isinstance(t, int) for t in prompt)):
            raise TypeError("prompt must be text or a sequence of token ids")
        if prompt != request.prompt:
            changes["prompt"] = prompt
    return changes
