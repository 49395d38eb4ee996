"""Server-Sent Events: the one SSE framer of the SDK, and the guarded event stream.

:func:`encode_sse` is the only place that writes SSE wire format (``id:``, ``retry:``,
``event:``, ``data:`` and comments); :func:`sse_event` and :func:`sse_json` are shorthands
over it for apps that build their own responses (the vLLM abort benchmark, hand-written
endpoints). :class:`SSEEvents` turns a model's stream into the events every adapter sends:
data, heartbeats, and a closing sequence chosen by its :class:`Framing`: our own
``evicted``/``error``/``done`` events (:class:`DemoFraming`, the default) or OpenAI's chunk
format (:class:`~llm_guard_sdk.adapters.openai_chunks.OpenAIChunks`). Nothing here imports a
web framework; each adapter only wraps these events in its own response type.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from typing import Any, Final, NamedTuple, Protocol

import anyio

from llm_guard_sdk.errors import BackendError
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import GuardedStream, guard_stream

from .wire import dumps, eviction_reason, model_failure

SSE_HEADERS: Final = {"cache-control": "no-cache", "x-accel-buffering": "no"}
"""Response headers of every event stream: no caching, no proxy buffering (nginx)."""


class Event(NamedTuple):
    """One SSE frame: ``data`` (with ``event``) or, for heartbeats, only ``comment``.

    ``id`` sets the client's last event id (sent back as ``Last-Event-ID`` on reconnect);
    ``retry`` the client's reconnection delay in milliseconds.
    """

    event: str | None
    data: str | None
    comment: str | None = None
    id: str | None = None
    retry: int | None = None


PING: Final = Event(None, None, "ping")


def encode_sse(event: Event) -> str:
    """Wire format of one event, with newline line ends; each ``data`` line gets its field.

    Raises:
        ValueError: An ``id`` with a line break or NUL, or a negative ``retry``: a client would
            read them differently from what was meant.
    """
    if event.id is None and event.retry is None:  # the common case, kept short
        if event.data is None:
            return f": {event.comment}\n\n"
        lines = [f"event: {event.event}"] if event.event else []
    else:
        lines = [f": {event.comment}"] if event.comment is not None else []
        if event.id is not None:
            if any(c in event.id for c in "\r\n\0"):
                raise ValueError(f"an SSE id cannot hold a line break or NUL: {event.id!r}")
            lines.append(f"id: {event.id}")
        if event.retry is not None:
            if event.retry < 0:
                raise ValueError(f"retry must be milliseconds >= 0, got {event.retry!r}")
            lines.append(f"retry: {event.retry}")
        if event.event and event.data is not None:
            lines.append(f"event: {event.event}")
        if event.data is None:
            return "\n".join(lines) + "\n\n"
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return "\n".join(lines) + "\n\n"


def sse_event(data: str, *, event: str | None = None) -> str:
    """Frame one SSE event; every line of ``data`` gets its own ``data:`` field."""
    return encode_sse(Event(event, data))


def sse_json(payload: object, *, event: str | None = None) -> str:
    """Frame a JSON payload (compact, as the adapters send it) as one SSE event."""
    return encode_sse(Event(event, dumps(payload)))


_END: Final = object()
_ERROR: Final = object()
_TIMEOUT: Final = object()
_BUFFER: Final = 32  # items read ahead of a slow client; bounded, so memory stays bounded


class ReadAhead:
    """Reads a (guarded) stream in its own task into a small queue.

    Two reasons. Waiting for the next item can time out (for heartbeats) without cancelling
    the model. And the reader asks for the next item as soon as it has queued one, so a guarded
    stream is nearly always *waiting* when the guard closes it: it then ends quietly and the
    response can still send its closing events. (A stream closed while nobody waits on it is
    closed on the spot, and an HTTP response without open streams is told the client is gone,
    which Starlette answers by abandoning the response mid-body.)
    """

    def __init__(self, source: AsyncIterator[Any]) -> None:
        self.source = source
        self.queue: asyncio.Queue[tuple[object, Any]] = asyncio.Queue(maxsize=_BUFFER)
        self.task: asyncio.Task[None] | None = None

    async def _produce(self) -> None:
        put = self.queue.put
        try:
            async for item in self.source:
                await put((None, item))
        except Exception as exc:  # re-raised by get(); cancellation just ends the reader
            await put((_ERROR, exc))
            return
        await put((_END, None))

    async def get(self, patience: float | None = None) -> tuple[object, Any]:
        """``(None, item)``, ``(_END, None)``, or ``(_TIMEOUT, None)`` after ``patience`` s.

        Raises:
            Exception: Whatever the source raised.
        """
        if self.task is None:
            self.task = asyncio.ensure_future(self._produce())
        try:
            async with asyncio.timeout(patience or None):
                kind, value = await self.queue.get()
        except TimeoutError:
            return _TIMEOUT, None
        if kind is _ERROR:
            raise value
        return kind, value

    async def aclose(self) -> None:
        """Stop the reader and wait for it, shielded.

        anyio cancel scopes re-cancel every await, and the source must be closed before the
        response returns.
        """
        task = self.task
        if task is None or task.done():
            return
        task.cancel()
        with anyio.CancelScope(shield=True), contextlib.suppress(
            asyncio.CancelledError, Exception
        ):
            await task


def text_of(item: object) -> str:
    """An item's text: str as is, bytes decoded (UTF-8, replacing errors), anything else JSON."""
    if isinstance(item, str):
        return item
    if isinstance(item, bytes | bytearray):
        return bytes(item).decode("utf-8", "replace")
    return dumps(item)


class Framing(Protocol):
    """How an SSE response frames its items and how it ends."""

    def data(self, item: object) -> Event:
        """One item of the model's stream."""

    def error(self, exc: BackendError) -> list[Event]:
        """The last events when the backend failed mid-stream."""

    def end(self, stopped: CloseReason | None) -> list[Event]:
        """The last events; ``stopped`` is why the guard cut the stream short, if it did."""

    def error_document(self, exc: BackendError) -> dict[str, object]:
        """The JSON body of a plain HTTP error before the stream started (``wait_first``)."""


class DemoFraming:
    """Our own protocol: ``data`` events (named ``event_type`` if given), then ``event: done``.

    ``event: evicted`` (``{"reason"}``) precedes ``done`` when the guard stopped the stream;
    ``event: error`` (``{"error", "status"}``) replaces it when the backend failed mid-stream.
    """

    def __init__(self, event_type: str | None = None) -> None:
        self.event_type = event_type

    def data(self, item: object) -> Event:
        """A data event with the item's text."""
        return Event(self.event_type, text_of(item))

    def error(self, exc: BackendError) -> list[Event]:
        """``event: error`` with ``{"error", "status"}``."""
        return [Event("error", dumps({"error": exc.message, "status": exc.status}))]

    def end(self, stopped: CloseReason | None) -> list[Event]:
        """``event: done``, after ``event: evicted`` when the guard stopped the stream."""
        done = Event("done", "{}")
        if stopped is None:
            return [done]
        return [Event("evicted", dumps({"reason": stopped.value})), done]

    def error_document(self, exc: BackendError) -> dict[str, object]:
        """``{"error", "reason"?, "retry_after"?}`` (:meth:`BackendError.document`)."""
        return exc.document()


class SSEEvents:
    """The events of one guarded SSE response.

    Items become data events as ``framing`` says (default :class:`DemoFraming`); ``ping``
    comments keep proxies and clients from timing out while the model is silent; the end is
    the framing's. ``event_ids`` numbers every event (``id: 1``, ``2``, ...); ``retry`` (ms)
    goes out once, with the first frame.
    """

    def __init__(self, source: AsyncIterable[Any], *, ping: float | None = 15.0,
                 event_type: str | None = None, session: Session | None = None,
                 framing: Framing | None = None, retry: int | None = None,
                 event_ids: bool = False) -> None:
        if ping is not None and ping < 0:
            raise ValueError(f"ping must be seconds >= 0 or None, got {ping!r}")
        if retry is not None and (isinstance(retry, bool) or not isinstance(retry, int)
                                  or retry < 0):
            raise ValueError(f"retry must be whole milliseconds >= 0 or None, got {retry!r}")
        if framing is not None and event_type is not None:
            raise ValueError("event_type only applies to the default framing; pass one or the "
                             "other")
        self.framing: Framing = framing if framing is not None else DemoFraming(event_type)
        self.stream: GuardedStream[Any] = guard_stream(source, session=session)
        self.ping = ping
        self.retry = retry
        self.event_ids = event_ids
        self._stamping = event_ids or retry is not None
        self._sequence = 0
        self.reader = ReadAhead(self.stream)
        self._first: tuple[object, Any] | None = None
        self._events: AsyncGenerator[Event, None] | None = None

    async def prime(self) -> None:
        """Wait for the first item now, so what the backend raises before it propagates."""
        if self._first is None:
            self._first = await self.reader.get()

    def _stamp(self, event: Event) -> Event:
        """Add the event id and, on the first frame, the retry delay."""
        if self.event_ids and event.data is not None:
            self._sequence += 1
            event = event._replace(id=str(self._sequence))
        if self.retry is not None:
            event, self.retry = event._replace(retry=self.retry), None
        return event

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._events is None:
            self._events = self._generate()
        return self._events

    async def _generate(self) -> AsyncGenerator[Event, None]:
        stream, reader, framing = self.stream, self.reader, self.framing
        last: list[Event]
        try:
            pending, self._first = self._first, None
            while True:
                kind, item = pending if pending is not None else await reader.get(self.ping)
                pending = None
                if kind is _END:
                    break
                event = PING if kind is _TIMEOUT else framing.data(item)
                yield self._stamp(event) if self._stamping else event
        except BackendError as exc:
            last = framing.error(exc)
        except Exception as exc:  # the app's model failed after the 200: an error event
            last = framing.error(model_failure(exc))
        else:
            last = []
        finally:
            await reader.aclose()
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        if not last:
            last = framing.end(eviction_reason(stream))
        for event in last:
            yield self._stamp(event) if self._stamping else event

    async def aclose(self) -> None:
        """Close the events, the reader and the stream (idempotent), even while cancelled.

        Frameworks do not close response iterators; responses call this on every way out.
        """
        with anyio.CancelScope(shield=True):
            if self._events is not None:
                await self._events.aclose()
            await self.reader.aclose()
            await self.stream.aclose()
