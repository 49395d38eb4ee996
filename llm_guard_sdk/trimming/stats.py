"""The ``"context"`` extension: what trimming saved, for the status document.

The chat helpers record every trim here, so ``/llm-guard/status`` shows whether histories
are being cut (and by how much) without anyone reading conversation text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from llm_guard_sdk.trimming.trim import TrimResult

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard


class ContextStats:
    """Counters of the histories trimmed under one guard; status section ``"context"``."""

    name: ClassVar[str] = "context"

    def __init__(self) -> None:
        self.trims_total = 0
        self.trimmed_tokens_total = 0
        self.trimmed_messages_total = 0
        self.over_budget_total = 0
        self.fallbacks_total = 0
        self.invalid_histories_total = 0
        self.errors_total = 0
        self.last_fallback = ""
        self.last_error = ""

    def setup(self, guard: Guard) -> None:
        """Extension entry point: report under ``"context"`` in the status document."""
        guard.add_status_section(self.name, self.status)

    def record(self, result: TrimResult[Any]) -> None:
        """Count one trim: tokens and messages it removed, a strategy fallback.

        An over-budget result is counted as a refusal only: the chat helpers do not apply it.
        """
        if result.over_budget:
            self.over_budget_total += 1
            return
        if result.trimmed:
            self.trims_total += 1
            self.trimmed_tokens_total += result.trimmed_tokens
            self.trimmed_messages_total += len(result.dropped)
        if result.fallback is not None:
            self.fallbacks_total += 1
            self.last_fallback = result.fallback

    def record_error(self, exc: BaseException) -> None:
        """Count a trim that raised (a strategy's or tokenizer's bug)."""
        self.errors_total += 1
        self.last_error = f"{type(exc).__name__}: {exc}"[:200]

    def record_invalid_history(self) -> None:
        """Count a client history that was not a list of messages."""
        self.invalid_histories_total += 1

    def status(self) -> dict[str, Any]:
        """The status section."""
        return {
            "trims_total": self.trims_total,
            "trimmed_tokens_total": self.trimmed_tokens_total,
            "trimmed_messages_total": self.trimmed_messages_total,
            "over_budget_total": self.over_budget_total,
            "fallbacks_total": self.fallbacks_total,
            "last_fallback": self.last_fallback,
            "invalid_histories_total": self.invalid_histories_total,
            "errors_total": self.errors_total,
            "last_error": self.last_error,
        }
