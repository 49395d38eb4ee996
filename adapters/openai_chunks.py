"""OpenAI's streaming format for the SSE helpers, so OpenAI clients can read a guarded endpoint.

``sse_response(source, framing=OpenAIChunks(model="tiny"))`` (any adapter) sends what
``POST /v1/chat/completions`` with ``"stream": true`` sends: one ``data: {json}`` per item in the
``chat.completion.chunk`` shape (``kind="completion"``: ``text_completion``, as
``/v1/completions``), a last chunk with ``finish_reason``, then ``data: [DONE]``. When the
guard stops the stream (eviction, a timeout) or the backend fails mid-stream, an OpenAI error
object (``data: {"error": {"message", "type", "param", "code"}}``) replaces the last chunk, as
vLLM's server does; the ``openai`` package raises it as ``APIError``. Heartbeats stay SSE
comments, which OpenAI clients skip.

Items are text (str or bytes). A mapping with ``"text"`` and an optional ``"finish_reason"``
sets the reason of the last chunk (``"length"`` when the token limit cut the answer); the
default is ``"stop"``.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Final, Literal

from llm_guard_sdk.errors import BackendError
from llm_guard_sdk.session import CloseReason

from .sse import Event, text_of
from .wire import dumps

DONE: Final = Event(None, "[DONE]")
_PREFIX: Final = {"chat": ("chatcmpl-", "chat.completion.chunk"),
                  "completion": ("cmpl-", "text_completion")}


def openai_error(message: str, *, error_type: str, code: str | int | None = None,
                 param: str | None = None) -> dict[str, object]:
    """An OpenAI error document: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def backend_error_document(exc: BackendError) -> dict[str, object]:
    """A :class:`BackendError` as OpenAI reports errors (4xx: ``invalid_request_error``)."""
    kind = "invalid_request_error" if 400 <= exc.status < 500 else "server_error"
    return openai_error(exc.message, error_type=kind,
                        code=exc.reason if exc.reason is not None else exc.status)


class OpenAIChunks:
    """The :class:`~llm_guard_sdk.adapters.sse.Framing` of OpenAI's streaming API.

    Args:
        model: The ``model`` field of every chunk (the served model name).
        kind: ``"chat"`` (``chat.completion.chunk``, ``choices[].delta``) or ``"completion"``
            (``text_completion``, ``choices[].text``).
        request_id: The ``id`` of every chunk; a fresh ``chatcmpl-``/``cmpl-`` id by default.
        created: The ``created`` Unix time; now by default.
    """

    def __init__(self, model: str, *, kind: Literal["chat", "completion"] = "chat",
                 request_id: str | None = None, created: int | None = None) -> None:
        if kind not in _PREFIX:
            raise ValueError(f'kind must be "chat" or "completion", got {kind!r}')
        prefix, self.object = _PREFIX[kind]
        self.kind = kind
        self.model = model
        self.id = request_id if request_id is not None else prefix + secrets.token_hex(12)
        self.created = created if created is not None else int(time.time())
        self.finish_reason = "stop"
        self._role_sent = False

    def chunk(self, text: str | None, finish_reason: str | None = None) -> dict[str, object]:
        """One chunk document; ``text`` None for the last, empty one."""
        choice: dict[str, object] = {"index": 0}
        if self.kind == "chat":
            delta: dict[str, str] = {}
            if not self._role_sent:
                delta["role"] = "assistant"
                self._role_sent = True
            if text is not None:
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice["text"] = text if text is not None else ""
        choice["logprobs"] = None
        choice["finish_reason"] = finish_reason
        return {"id": self.id, "object": self.object, "created": self.created,
                "model": self.model, "choices": [choice]}

    def data(self, item: object) -> Event:
        """A chunk carrying the item's text."""
        if isinstance(item, Mapping):
            reason = item.get("finish_reason")
            if isinstance(reason, str):
                self.finish_reason = reason
            item = item.get("text", "")
        return Event(None, dumps(self.chunk(text_of(item))))

    def error(self, exc: BackendError) -> list[Event]:
        """The backend failed mid-stream: its error object, then ``[DONE]``."""
        return [Event(None, dumps(backend_error_document(exc))), DONE]

    def end(self, stopped: CloseReason | None) -> list[Event]:
        """The last chunk with its ``finish_reason`` and ``[DONE]``; an error if cut short."""
        if stopped is None:
            return [Event(None, dumps(self.chunk(None, self.finish_reason))), DONE]
        message = f"llm-guard stopped the stream: {stopped.value}"
        error = openai_error(message, error_type="server_error", code=stopped.value)
        return [Event(None, dumps(error)), DONE]

    def error_document(self, exc: BackendError) -> dict[str, object]:
        """The plain HTTP error body before the stream started."""
        return backend_error_document(exc)

    def completion(self, text: str, finish_reason: str | None = None) -> dict[str, object]:
        """The whole answer as one response (``chat.completion`` or ``text_completion``)."""
        reason = finish_reason or self.finish_reason
        choice: dict[str, object] = {"index": 0, "logprobs": None, "finish_reason": reason}
        if self.kind == "chat":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {"id": self.id, "object": "chat.completion" if self.kind == "chat"
                else "text_completion", "created": self.created, "model": self.model,
                "choices": [choice]}
