"""Exceptions raised by llm-guard-sdk."""

from __future__ import annotations


class GuardError(Exception):
    """Base class so callers can catch everything the SDK raises on purpose."""


class ConfigError(GuardError, ValueError):
    """An invalid setting; raised at start-up so a bad deploy fails before traffic arrives."""


class MissingDependencyError(GuardError, ImportError):
    """An optional extra is not installed; the message carries the exact pip command."""

    def __init__(self, what: str, extra: str, *, command: str | None = None) -> None:
        self.extra = extra
        self.command = command or f"pip install 'llm-guard-sdk[{extra}]'"
        super().__init__(f"{what} is not installed. Install it with: {self.command}")
