"""Framework-free pieces the adapters share: SSE events with heartbeats and the chat protocol.

Each adapter only translates these into its framework's responses and sockets, so FastAPI,
Litestar and Channels apps behave the same way on completion, disconnect, eviction and bad
input, and one client works against all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, TypeVar

import anyio

from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.context import SCOPE_KEY, current_session
from llm_guard_sdk.errors import BackendError
from llm_guard_sdk.guard import current_guard
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import GuardedStream, guard_stream

T = TypeVar("T")

WS_UNSUPPORTED_DATA: Final = 1003
WS_MESSAGE_TOO_BIG: Final = 1009
_NOT_EVICTED = (None, CloseReason.COMPLETED, CloseReason.DISCONNECTED)
_DEFAULT_MAX_MESSAGE_BYTES: Final = GuardConfig().max_message_bytes

MISSING_SESSION = (
    "no llm-guard session for this request: the guard middleware is not installed, or the "
    "path is exempt (LLM_GUARD_EXEMPT_PATHS); use the optional dependency there"
)


def session_from_scope(scope: Any) -> Session | None:
    """The connection's session: from the ASGI scope, else the current context."""
    session = scope.get(SCOPE_KEY) if scope is not None else None
    return session if isinstance(session, Session) else current_session()


def max_message_bytes(override: int | None = None) -> int:
    """The inbound WebSocket message limit: ``override``, else the serving guard's config."""
    if override is not None:
        return override
    guard = current_guard()
    return guard.config.max_message_bytes if guard is not None else _DEFAULT_MAX_MESSAGE_BYTES


def dumps(payload: object) -> str:
    """Compact JSON, as every adapter sends it."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


# -- SSE ------------------------------------------------------------------------------------


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


class Event(NamedTuple):
    """One SSE frame: ``data`` (with ``event``) or, for heartbeats, only ``comment``."""

    event: str | None
    data: str | None
    comment: str | None = None


PING: Final = Event(None, None, "ping")


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
        reason = stream.close_reason
        if reason is not None and reason not in _NOT_EVICTED:
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


def encode_sse(event: Event) -> str:
    """Wire format of one event, with newline line ends."""
    if event.data is None:
        return f": {event.comment}\n\n"
    lines = [f"event: {event.event}"] if event.event else []
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return "\n".join(lines) + "\n\n"


# -- WebSocket chat -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One prompt of a WebSocket chat, handed to the app's handler.

    Attributes:
        prompt: The ``prompt`` field of the client's JSON message.
        message: The whole JSON object (``max_tokens`` and any other fields).
        history: Earlier turns plus this prompt, as ``{"role", "content"}`` dicts; owned by the
            session, so it is freed when the connection closes or is evicted.
        session: The connection's session, or None outside the middleware.
    """

    prompt: str
    message: dict[str, Any]
    history: list[dict[str, str]] = field(default_factory=list)
    session: Session | None = None


ChatHandler = Callable[[ChatRequest], AsyncIterable[str] | Awaitable[AsyncIterable[str]]]
"""Returns the token stream for one prompt; raises ValueError for a bad request."""


class Reject(NamedTuple):
    """Close the socket with this code and reason."""

    code: int
    reason: str


def _too_big(text: str, limit: int) -> bool:
    # A character is 1-4 UTF-8 bytes: only encode when the length alone cannot decide.
    return len(text) > limit or (4 * len(text) > limit and len(text.encode()) > limit)


class ChatProtocol:
    """The chat loop's per-connection state and its answer to each inbound frame.

    Protocol: the client sends ``{"prompt": "...", ...}`` as a text frame and receives
    ``{"type": "token", "text"}`` frames, then ``{"type": "done", "turns": n}``. Bad input:
    a frame over ``max_bytes`` closes the socket with 1009, a binary frame with 1003 (both
    protocol violations a well-behaved client never commits); invalid JSON or a missing
    prompt gets ``{"type": "error"}`` and the connection stays usable, since that is an
    application-level mistake the client can correct.
    """

    def __init__(self, handler: ChatHandler, send_text: Callable[[str], Awaitable[None]], *,
                 session: Session | None, max_bytes: int) -> None:
        self.handler = handler
        self.send_text = send_text
        self.session = session
        self.max_bytes = max_bytes
        self.history: list[dict[str, str]] = session.attach([]) if session is not None else []
        self.turns = 0

    @property
    def gone(self) -> bool:
        """The session closed (client left, evicted): nothing more can reach the client."""
        return self.session is not None and self.session.closed

    async def send(self, payload: dict[str, Any]) -> None:
        """Send one JSON frame, unless the connection is already gone."""
        if not self.gone:
            await self.send_text(dumps(payload))

    async def on_frame(self, text: str | None, data: bytes | None) -> Reject | None:
        """Handle one inbound frame; a returned :class:`Reject` means close the socket."""
        size = len(data) if text is None and data is not None else None
        if (size is not None and size > self.max_bytes) or (
                text is not None and _too_big(text, self.max_bytes)):
            return Reject(WS_MESSAGE_TOO_BIG, "message too big")
        if text is None:
            return Reject(WS_UNSUPPORTED_DATA, "binary frames are not supported; send JSON text")
        try:
            message = json.loads(text)
            if not isinstance(message, dict) or not isinstance(message.get("prompt"), str):
                raise ValueError('expected a JSON object with a string "prompt"')
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            await self.send({"type": "error", "error": f"bad request: {exc}"})
            return None
        await self.turn(message["prompt"], message)
        return None

    async def turn(self, prompt: str, message: dict[str, Any]) -> None:
        """Stream one answer; history keeps the turn unless the request or backend failed."""
        history = self.history
        asked = {"role": "user", "content": prompt}
        history.append(asked)
        try:
            try:
                source = self.handler(ChatRequest(prompt, message, history, self.session))
                if inspect.isawaitable(source):
                    source = await source
            except ValueError as exc:
                _forget(history, asked)
                await self.send({"type": "error", "error": f"bad request: {exc}"})
                return
            reply: list[str] = []
            async with guard_stream(source, session=self.session) as stream:
                async for token in stream:
                    reply.append(token)
                    await self.send({"type": "token", "text": token})
        except BackendError as exc:
            _forget(history, asked)
            await self.send({"type": "error", "error": exc.message, "status": exc.status})
            return
        if self.gone:
            return  # disconnected or evicted: the middleware has ended the connection
        reason = stream.close_reason
        if reason is not None and reason not in _NOT_EVICTED:  # e.g. a chunk timeout
            await self.send({"type": "evicted", "reason": reason.value})
        history.append({"role": "assistant", "content": "".join(reply)})
        self.turns += 1
        await self.send({"type": "done", "turns": self.turns})


def _forget(history: list[dict[str, str]], entry: dict[str, str]) -> None:
    """Drop ``entry`` (by identity) from ``history``."""
    history[:] = [m for m in history if m is not entry]
