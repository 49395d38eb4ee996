"""What a conversation message is, checked once at the edge: ``{"role", "content"}`` mappings.

The trimming strategies only see histories that passed :func:`parse_history`, so they never
guess at shapes; a client that sends anything else gets an :class:`InvalidHistoryError` naming
the first bad entry (HTTP 400, WebSocket close 1003).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

from llm_guard_sdk.errors import InvalidHistoryError

ROLES: Final = ("system", "user", "assistant", "tool")
"""The roles a message may have (OpenAI's chat roles without the deprecated ``function``)."""

Message = Mapping[str, Any]
"""One message: at least ``role`` (one of :data:`ROLES`) and ``content`` (a string)."""

M = TypeVar("M", bound=Message)

#: Close reasons of a WebSocket are at most 123 bytes: keep the message short.
_MAX_SHOWN = 40


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN - 3] + "..."


def check_message(message: object, where: str) -> None:
    """Raise :class:`InvalidHistoryError` unless ``message`` is a valid message.

    Keys other than ``role`` and ``content`` (``name``, ``tool_call_id``) are allowed and kept.
    """
    if not isinstance(message, Mapping):
        raise InvalidHistoryError(f"{where} must be an object with role and content, "
                                  f"got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise InvalidHistoryError(f"{where}.role must be one of {', '.join(ROLES)}; "
                                  f"got {_shown(role)}")
    if not isinstance(message.get("content"), str):
        raise InvalidHistoryError(f"{where}.content must be a string, "
                                  f"got {type(message.get('content')).__name__}")


def parse_history(value: object, *, name: str = "history") -> list[Message]:
    """Check a client-supplied history and return it as a list of messages.

    Raises:
        InvalidHistoryError: ``value`` is not a list, or an entry is not a message; the error
            names the first bad entry (``history[2].role must be one of ...``).
    """
    if not isinstance(value, list | tuple):
        raise InvalidHistoryError(f"{name} must be a list of messages, "
                                  f"got {type(value).__name__}")
    for index, message in enumerate(value):
        check_message(message, f"{name}[{index}]")
    return list(value)


def check_history(messages: Sequence[M]) -> Sequence[M]:
    """:func:`parse_history` for typed callers: the same checks, the sequence unchanged."""
    parse_history(messages if isinstance(messages, list | tuple) else list(messages))
    return messages
