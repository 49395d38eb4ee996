"""Server-Sent Events: the one SSE framer of the SDK, and the guarded event stream.

:func:`encode_sse` is the only place that writes SSE wire format; :func:`sse_event` and
:func:`sse_json` are shorthands over it for apps that build their own responses (the vLLM
abort benchmark, hand-written endpoints). :class:`SSEEvents` turns a model's stream into the
events every adapter sends: data, heartbeats, and a closing ``evicted``/``error``/``done``.
Nothing here imports a web framework; each adapter only wraps these events in its own
response type.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from typing import Any, Final, NamedTuple

import anyio

from llm_guard_sdk.errors import BackendError
from llm_guard_sdk.session import Session
from llm_guard_sdk.stream import GuardedStream, guard_stream

from .wire import dumps, eviction_reason

SSE_HEADERS: Final = {"cache-control": "no-cache", "x-accel-buffering": "no"}
"""Response headers of every event stream: no caching, no proxy buffering (nginx)."""


class Event(NamedTuple):
    """One SSE frame: ``data`` (with ``event``) or, for heartbeats, only ``comment``."""

    event: str | None
    data: str | None
    comment: str | None = None


PING: Final = Event(None, None, "ping")


def encode_sse(event: Event) -> str:
    """Wire format of one event, with newline line ends; each ``data`` line gets its field."""
    if event.data is None:
        return f": {event.comment}\n\n"
    lines = [f"event: {event.event}"] if event.event else []
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


def _text(item: object) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, bytes | bytearray):
        return bytes(item).decode("utf-8", "replace")
    return dumps(item)


class SSEEvents:
    """The events of one guarded SSE response.

    Items become ``data`` events (``event_type`` if given); ``ping`` comments keep proxies and
    clients from timing out while the model is silent; the end is ``event: done``, preceded by
    ``event: evicted`` (``{"reason": ...}``) when the guard stopped the stream, or replaced by
    ``event: error`` (``{"error", "status"}``) when the backend failed mid-stream.
    """

    def __init__(self, source: AsyncIterable[Any], *, ping: float | None = 15.0,
                 event_type: str | None = None, session: Session | None = None) -> None:
        if ping is not None and ping < 0:
            raise ValueError(f"ping must be seconds >= 0 or None, got {ping!r}")
        self.stream: GuardedStream[Any] = guard_stream(source, session=session)
        self.ping = ping
        self.event_type = event_type
        self.reader = ReadAhead(self.stream)
        self._first: tuple[object, Any] | None = None
        self._events: AsyncGenerator[Event, None] | None = None

    async def prime(self) -> None:
        """Wait for the first item now, so what the backend raises before it propagates."""
        if self._first is None:
            self._first = await self.reader.get()

    def data(self, item: object) -> Event:
        """Frame one item as a data event."""
        return Event(self.event_type, _text(item))

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._events is None:
            self._events = self._generate()
        return self._events

    async def _generate(self) -> AsyncGenerator[Event, None]:
        stream, reader = self.stream, self.reader
        try:
            pending, self._first = self._first, None
            while True:
                kind, item = pending if pending is not None else await reader.get(self.ping)
                pending = None
                if kind is _END:
                    break
                yield PING if kind is _TIMEOUT else self.data(item)
        except BackendError as exc:
            yield Event("error", dumps({"error": exc.message, "status": exc.status}))
            return
        finally:
            await reader.aclose()
            with anyio.CancelScope(shield=True):
                await stream.aclose()
        reason = eviction_reason(stream)
        if reason is not None:
            yield Event("evicted", dumps({"reason": reason.value}))
        yield Event("done", "{}")

    async def aclose(self) -> None:
        """Close the events, the reader and the stream (idempotent), even while cancelled.

        Frameworks do not close response iterators; responses call this on every way out.
        """
        with anyio.CancelScope(shield=True):
            if self._events is not None:
                await self._events.aclose()
            await self.reader.aclose()
            await self.stream.aclose()
