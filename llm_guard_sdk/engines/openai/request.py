"""The body of a streaming OpenAI request, checked before anything is sent.

A bad argument is an :class:`~llm_guard_sdk.errors.InvalidRequestError` (400) the client can
read, raised when the stream is created; the server never sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llm_guard_sdk.errors import InvalidRequestError

__all__ = ["RESERVED", "request_body"]

RESERVED = frozenset({"model", "prompt", "messages", "stream", "max_tokens"})
"""Body fields the engine sets itself; ``params`` may not name them."""


def _check_messages(messages: object) -> list[dict[str, Any]]:
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        raise InvalidRequestError("messages must be a non-empty list of "
                                  "{'role': str, 'content': str} objects")
    checked = []
    for i, message in enumerate(messages):
        if not (isinstance(message, Mapping) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise InvalidRequestError(f"messages[{i}] must be an object with string 'role' "
                                      "and 'content'")
        checked.append(dict(message))
    return checked


def request_body(model: str, prompt: str | Sequence[int] | None,
                 messages: Sequence[Mapping[str, Any]] | None, max_tokens: int | None,
                 params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The path (``/completions`` or ``/chat/completions``) and JSON body to stream."""
    body: dict[str, Any] = {"model": model, "stream": True}
    if messages is not None:
        if prompt is not None:
            raise InvalidRequestError("pass either prompt or messages, not both")
        path = "/chat/completions"
        body["messages"] = _check_messages(messages)
    elif isinstance(prompt, str) or (
            isinstance(prompt, Sequence) and prompt
            and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)):
        path = "/completions"
        body["prompt"] = prompt if isinstance(prompt, str) else list(prompt)
    else:
        raise InvalidRequestError("prompt must be text or a sequence of token ids "
                                  "(or pass messages)")
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        body["max_tokens"] = max_tokens
    if params is not None:
        if not isinstance(params, Mapping) or not all(isinstance(k, str) for k in params):
            raise InvalidRequestError("params must be a mapping of body field names to values")
        clash = sorted(RESERVED.intersection(params))
        if clash:
            raise InvalidRequestError(f"params may not set {', '.join(clash)}: pass them as "
                                      "arguments")
        body.update(params)
    return path, body
