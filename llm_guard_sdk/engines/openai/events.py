"""Reading an OpenAI-compatible server's SSE stream: bounded events, then text deltas.

``httpx-sse`` and ``aiter_lines()`` buffer a line of any length, and neither says how much they
hold; the guard must count what a session's remote stream buffers (``held=``) and refuse a
server that never ends an event. :class:`SSEDecoder` is the small part of the SSE grammar the
OpenAI servers use (``data:`` lines, blank-line-terminated events, ``[DONE]``), over a buffer
whose size is public and bounded.
"""

from __future__ import annotations

import json
from typing import Any

from llm_guard_sdk.errors import BackendError

__all__ = ["DONE", "MAX_EVENT_BYTES", "SSEDecoder", "StreamEvent", "protocol_error",
           "read_event"]

DONE = "[DONE]"
MAX_EVENT_BYTES = 1 << 20
"""An event larger than this (1 MiB) is garbage: no token delta comes near it."""


def protocol_error(what: str) -> BackendError:
    """The model server spoke something else than OpenAI's SSE: 502, nothing of its text."""
    error = BackendError(f"the model server sent an invalid stream ({what})",
                         reason="remote_protocol")
    error.status = 502
    return error


class SSEDecoder:
    """Split bytes into the ``data`` of each SSE event, holding at most ``max_event_bytes``.

    Attributes:
        buffered_bytes: Bytes received and not yet part of a complete event (what a session's
            remote stream holds, declared to its guarded stream).
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._pending = bytearray()
        self._data: list[str] = []
        self.buffered_bytes = 0

    def feed(self, chunk: bytes) -> list[str]:
        """The data of the events ``chunk`` completes (comments and other fields skipped)."""
        self._pending += chunk
        events: list[str] = []
        while True:
            end = self._pending.find(b"\n")
            if end < 0:
                break
            raw = bytes(self._pending[:end]).rstrip(b"\r")
            del self._pending[:end + 1]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise protocol_error("not UTF-8") from None
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            field, _, value = line.partition(":")
            if field == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)
        self.buffered_bytes = len(self._pending) + sum(len(d) for d in self._data)
        if self.buffered_bytes > self.max_event_bytes:
            raise protocol_error(f"an event over {self.max_event_bytes} bytes")
        return events

    def clear(self) -> None:
        """Drop what is buffered (the stream ended)."""
        self._pending.clear()
        self._data = []
        self.buffered_bytes = 0


class StreamEvent:
    """One decoded chunk: the text of choice 0, the finish reasons seen, an error document."""

    __slots__ = ("error", "finished", "text")

    def __init__(self, text: str = "", finished: bool = False,
                 error: dict[str, Any] | None = None) -> None:
        self.text, self.finished, self.error = text, finished, error


def read_event(data: str) -> StreamEvent:
    """Decode one ``data`` payload of ``/v1/completions`` or ``/v1/chat/completions``.

    Choice 0's ``text`` (completions) or ``delta.content`` (chat) is the delta; ``finished`` is
    True once choice 0 has a ``finish_reason``. A payload with ``error`` (vLLM reports errors
    after the 200 that way) is returned as such. Anything not shaped so is a protocol error.
    """
    try:
        doc = json.loads(data)
    except ValueError:
        raise protocol_error("a data line that is not JSON") from None
    if not isinstance(doc, dict):
        raise protocol_error("a data line that is not a JSON object")
    if "error" in doc:
        error = doc["error"]
        return StreamEvent(error=error if isinstance(error, dict) else {"message": str(error)})
    choices = doc.get("choices")
    if not isinstance(choices, list):
        raise protocol_error("a chunk without choices")
    event = StreamEvent()
    for choice in choices:
        if not isinstance(choice, dict):
            raise protocol_error("a choice that is not an object")
        if choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if text is not None and not isinstance(text, str):
            raise protocol_error("a delta that is not text")
        event.text += text or ""
        event.finished = event.finished or choice.get("finish_reason") is not None
    return event
