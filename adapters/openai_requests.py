"""The body of an OpenAI ``POST /v1/chat/completions`` request, checked before any model work.

A guarded endpoint that OpenAI clients call must answer a malformed body the way OpenAI does:
a 400 with ``{"error": {"message", "type": "invalid_request_error", "param", "code"}}``, never
a 500. :func:`parse_chat_completion` reads the fields the demo needs (``messages``,
``stream``, ``model``, ``max_tokens``/``max_completion_tokens``) and rejects what it cannot
serve; other fields are ignored, as OpenAI-compatible servers commonly do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .openai_chunks import openai_error

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class OpenAIRequestError(ValueError):
    """A request body OpenAI would reject; :meth:`document` is the 400 answer."""

    status = 400

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    def document(self) -> dict[str, object]:
        """The OpenAI error object of this rejection."""
        return openai_error(str(self), error_type="invalid_request_error", param=self.param,
                            code="invalid_request")


@dataclass(frozen=True, slots=True)
class ChatCompletionRequest:
    """What the demo serves of a chat completion request."""

    messages: list[dict[str, str]]
    stream: bool = False
    model: str | None = None
    max_tokens: int | None = None

    def prompt(self) -> str:
        """The conversation as one prompt for a completion model: ``role: content`` lines."""
        lines = [f"{m['role']}: {m['content']}" for m in self.messages]
        return "\n".join([*lines, "assistant:"])


def _content(value: object, index: int) -> str:
    """A message's text: a string, or a list of ``{"type": "text", "text"}`` parts."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in value):
        return "".join(p["text"] for p in value)
    raise OpenAIRequestError(f"messages[{index}].content must be a string or a list of text "
                             "parts", f"messages[{index}].content")


def _messages(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise OpenAIRequestError("messages must be a non-empty list of {role, content} objects",
                                 "messages")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise OpenAIRequestError(f"messages[{i}] must be an object with a role out of "
                                     f"{', '.join(sorted(_ROLES))}", f"messages[{i}].role")
        messages.append({"role": message["role"], "content": _content(message.get("content"), i)})
    return messages


def parse_chat_completion(body: bytes) -> ChatCompletionRequest:
    """Check a request body; raises :class:`OpenAIRequestError` with the reason."""
    try:
        doc: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise OpenAIRequestError("the request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise OpenAIRequestError("the request body must be a JSON object")
    stream = doc.get("stream", False)
    if not isinstance(stream, bool):
        raise OpenAIRequestError("stream must be true or false", "stream")
    model = doc.get("model")
    if model is not None and not isinstance(model, str):
        raise OpenAIRequestError("model must be a string", "model")
    max_tokens = doc.get("max_completion_tokens", doc.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                   or max_tokens < 1):
        raise OpenAIRequestError("max_tokens must be an integer >= 1", "max_tokens")
    return ChatCompletionRequest(_messages(doc.get("messages")), stream, model, max_tokens)
