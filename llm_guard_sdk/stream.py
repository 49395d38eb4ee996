"""Guarded streams: an async iterator that is always closed, exactly once.

Starlette never calls ``aclose()`` on a response body iterator and, under ASGI spec 2.4, only learns
of a disconnect at the next ``send``; a generator waiting on the model keeps running and holds its
frame, its closure and the model's KV cache. :func:`guard_stream` fixes that: the guard can stop a
stream from outside (disconnect, eviction, timeout) by cancelling the one ``await`` the consumer is
blocked on, and every path through the stream ends in a single ``aclose()`` of the source.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

from llm_guard_sdk.context import current_session
from llm_guard_sdk.session import CloseReason, Session

T = TypeVar("T")


_SIZED = (str, bytes, bytearray, memoryview)

if sys.version_info >= (3, 12):
    _current_task = asyncio.current_task
else:  # 3.11's current_task() is pure Python; this is the same lookup without the overhead.
    from asyncio.events import _get_running_loop
    from asyncio.tasks import _current_tasks  # type: ignore[attr-defined]

    def _current_task() -> asyncio.Task[Any] | None:
        task: asyncio.Task[Any] | None = _current_tasks.get(_get_running_loop())
        return task


def default_sizer(chunk: object) -> int:
    """Bytes-ish size of a chunk: exact for bytes, character count for text, 0 otherwise."""
    return len(chunk) if isinstance(chunk, _SIZED) else 0


class GuardedStream(Generic[T]):
    """Wraps an async iterator so the guard can close it and it is closed exactly once.

    Attributes the sampler reads (cheaply, without locking; single event loop): ``started_at``,
    ``waiting`` (the consumer awaits the next chunk), ``bytes_out`` and ``chunks`` (traffic),
    ``backend_bytes`` and ``declared_bytes`` (held: counted in the session's held bytes while
    the stream is open, see :meth:`set_backend_bytes` and :meth:`declare_held`).
    """

    __slots__ = (
        "__weakref__",
        "_cancel_sent",
        "_close_requested",
        "_closed",
        "_held",
        "_it",
        "_on_session",
        "_sizer",
        "_source",
        "_waiter",
        "backend_bytes",
        "bytes_out",
        "chunks",
        "close_reason",
        "declared_bytes",
        "name", "session", "started_at",
        "stuck_chunks", "stuck_since",
    )

    def __init__(
        self,
        source: AsyncIterable[T],
        session: Session | None,
        *,
        name: str | None = None,
        sizer: Callable[[Any], int] = default_sizer,
        held: Callable[[], int] | None = None,
    ) -> None:
        if held is not None and not callable(held):
            raise TypeError(f"held must be a callable returning bytes, not {held!r}")
        self._source = source
        self._it: AsyncIterator[T] = source.__aiter__()
        self._sizer = sizer
        self._waiter: asyncio.Task[Any] | None = None
        self._cancel_sent = False
        self._close_requested: CloseReason | None = None
        self._closed = False
        self.session = session
        self.name = name or type(source).__name__
        self.started_at = time.monotonic()
        self.stuck_chunks = -1  # sampler bookkeeping for chunk timeouts
        self.stuck_since = 0.0
        self.bytes_out = 0
        self.chunks = 0
        self.backend_bytes = 0
        self.declared_bytes = 0 if held is None else _held_size(held())
        self._held = held
        self.close_reason: CloseReason | None = None
        self._on_session = False  # open on the session: ends there exactly once
        if session is not None:
            if session.closed:
                # The client left before the handler even built its stream (sse-starlette#156):
                # the first __anext__ closes the source instead of starting it, and the session
                # counts the stream as ended already (it may never be iterated).
                self._close_requested = session.close_reason or CloseReason.DISCONNECTED
            self._on_session = session.add_stream(self)

    @property
    def source(self) -> AsyncIterable[T]:
        """The wrapped iterable, as the app passed it (leak tracking watches it die)."""
        return self._source

    @property
    def iterator(self) -> AsyncIterator[T]:
        """The iterator taken from :attr:`source` (the same object for async generators)."""
        return self._it

    @property
    def closed(self) -> bool:
        """True once the source has been closed (or is being closed)."""
        return self._closed

    @property
    def stop_reason(self) -> CloseReason | None:
        """Why it was stopped from outside or closed, as soon as asked (None while running)."""
        return self.close_reason or self._close_requested

    def __aiter__(self) -> GuardedStream[T]:
        return self

    async def __anext__(self) -> T:
        # Hot path: one call per token. Keep it to attribute updates; no clock reads.
        if self._closed or self._close_requested is not None:
            if not self._closed:
                await self._finish(self._close_requested or CloseReason.COMPLETED)
            raise StopAsyncIteration
        task = _current_task()
        self._waiter = task
        try:
            item = await self._it.__anext__()
        except StopAsyncIteration:
            self._waiter = None
            self._absorb_cancel(task)
            await self._finish(self._close_requested or CloseReason.COMPLETED)
            raise
        except asyncio.CancelledError:
            self._waiter = None
            if self._cancel_sent and task is not None:
                self._cancel_sent = False
                if task.uncancel() == 0:
                    # Our own cancellation: end the stream quietly so the response finishes.
                    await self._finish(self._close_requested or CloseReason.EVICTED)
                    raise StopAsyncIteration from None
            session = self.session
            reason = session.close_reason if session and session.close_reason else None
            await self._finish(reason or CloseReason.ERROR)
            raise
        except BaseException:
            self._waiter = None
            await self._finish(CloseReason.ERROR)
            raise
        self._waiter = None
        if self._cancel_sent:
            self._absorb_cancel(task)
        if self._close_requested is not None:
            # Closed while the chunk was in flight; drop it rather than deliver after close.
            await self._finish(self._close_requested)
            raise StopAsyncIteration
        self.chunks += 1
        self.bytes_out += self._sizer(item)  # traffic only: a sent chunk is not held memory
        if self._held is not None:
            try:
                self.declare_held(self._held())
            except BaseException:
                await self._finish(CloseReason.ERROR)
                raise
        return item

    def declare_held(self, nbytes: int) -> None:
        """Declare how many bytes this stream holds now (e.g. a buffer the app keeps for it).

        Replaces the previous declaration; counted in the session's held bytes (eviction order,
        expected to free, status) until the stream ends. ``guard_stream(..., held=fn)`` calls
        this with ``fn()`` after every chunk.
        """
        self.declared_bytes = _held_size(nbytes)
        self._held_changed()

    def set_backend_bytes(self, nbytes: int) -> None:
        """Set the bytes the backend holds for this stream's request (e.g. its KV cache).

        Per stream, so concurrent streams of one session add up; released when it ends.
        """
        self.backend_bytes = _held_size(nbytes)
        self._held_changed()

    def _held_changed(self) -> None:
        session = self.session
        if session is not None and self._on_session and not self._closed:
            session.held_changed()

    @property
    def waiting(self) -> bool:
        """True while the consumer is blocked waiting for the next chunk."""
        return self._waiter is not None

    def _absorb_cancel(self, task: asyncio.Task[Any] | None) -> None:
        """Undo our cancellation when the source swallowed it instead of raising."""
        if self._cancel_sent and task is not None:
            self._cancel_sent = False
            task.uncancel()

    async def request_close(self, reason: CloseReason) -> None:
        """Stop the stream from outside the consumer; safe from any task on the same loop.

        If the consumer is blocked waiting for the next chunk, its await is cancelled and the
        consumer closes the source itself (a running generator cannot be closed from another
        task); otherwise the source is closed here.
        """
        if self._closed or self._close_requested is not None:
            return
        self._close_requested = reason
        waiter = self._waiter
        if waiter is None or waiter.done():
            await self._finish(reason)
        elif waiter is not asyncio.current_task():
            self._cancel_sent = True
            waiter.cancel()

    async def aclose(self) -> None:
        """Close the stream; idempotent."""
        await self._finish(self._close_requested or CloseReason.COMPLETED)

    async def __aenter__(self) -> GuardedStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._finish(CloseReason.ERROR if exc is not None else CloseReason.COMPLETED)

    async def _finish(self, reason: CloseReason) -> None:
        if self._closed:
            return
        self._closed = True
        self.close_reason = reason
        session = self.session
        try:
            aclose = getattr(self._it, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            if session is not None and self._on_session:
                session.remove_stream(self, reason)


def _held_size(nbytes: object) -> int:
    """A held size as declared by app or backend code: a non-negative int, or a clear error."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        raise TypeError(f"held bytes must be an int, not {type(nbytes).__name__}")
    if nbytes < 0:
        raise ValueError(f"held bytes must be >= 0, not {nbytes}")
    return nbytes


def guard_stream(
    source: AsyncIterable[T],
    *,
    session: Session | None = None,
    name: str | None = None,
    sizer: Callable[[Any], int] = default_sizer,
    held: Callable[[], int] | None = None,
) -> GuardedStream[T]:
    """Wrap ``source`` so it is closed exactly once, whoever ends it.

    The stream binds to ``session`` or, by default, to the session of the current request (see
    :func:`~llm_guard_sdk.current_session`). Outside the middleware it still guarantees
    ``aclose()`` on completion and error, but nothing can stop it from outside.

    Args:
        source: Any async iterable; async generators get ``aclose()``, plain iterators are
            closed when they have an ``aclose`` method.
        session: The session to account to; defaults to the current one.
        name: Label for status and leak reports (never the content).
        sizer: Returns the size of one chunk, counted as traffic (``bytes_out``); defaults to
            ``len`` for bytes/str.
        held: Returns the bytes the stream holds now (a buffer the app keeps for it); read at
            creation and after every chunk, counted in the session's held bytes until the
            stream ends. Or call :meth:`GuardedStream.declare_held` when it changes.
    """
    bound = session if session is not None else current_session()
    if isinstance(source, GuardedStream) and source.session is bound:
        return source  # already guarded for this session (e.g. by an integration)
    return GuardedStream(source, bound, name=name, sizer=sizer, held=held)
