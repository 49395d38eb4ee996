"""Guarded streams: an async iterator that is always closed, exactly once.

Starlette never calls ``aclose()`` on a response body iterator and, under ASGI spec 2.4, only learns
of a disconnect at the next ``send``; a generator waiting on the model keeps running and holds its
frame, its closure and the model's KV cache. :func:`guard_stream` fixes that: the guard can stop a
stream from outside (disconnect, eviction, timeout) by cancelling the one ``await`` the consumer is
blocked on, and every path through the stream ends in a single ``aclose()`` of the source.
"""

# Over 300 lines: the stream's lifecycle (close once, from inside or outside), the runner that
# carries it per chunk (_run) and the ends the compiled runner hands back (_source_ended,
# _late_chunk, _after_stop, each a branch of _run) must be read together to check that every
# path closes, in both implementations.

from __future__ import annotations

import asyncio
import sys
import time
from asyncio.events import _get_running_loop
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Awaitable, Callable
from types import AsyncGeneratorType, TracebackType
from typing import Any, Generic, TypeVar, cast

from llm_guard_sdk import hotpath
from llm_guard_sdk.context import current_session
from llm_guard_sdk.session import CloseReason, Session

T = TypeVar("T")


_SIZED = (str, bytes, bytearray, memoryview)
_SIZED_TYPES: frozenset[type[Any]] = frozenset(_SIZED)  # exact types: the hot path inline check

if sys.version_info >= (3, 12):
    # C, and given the loop it looks the task up without checking which loop is running.
    _task_of: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None] = (
        asyncio.current_task)
    _tasks_of_loops: object = asyncio.current_task  # what the compiled runner asks
else:  # 3.11's current_task() is pure Python and its get_running_loop() calls getpid().
    from asyncio.tasks import _current_tasks  # type: ignore[attr-defined]

    _task_of = _current_tasks.get
    _tasks_of_loops = _current_tasks  # the compiled runner looks the loop up itself


def _no_task(loop: object) -> None:
    return None


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
        "__weakref__", "_cancel_sent", "_close_requested", "_closed", "_held", "_it", "_next",
        "_on_session", "_runner", "_sizer", "_source", "_stopping", "_waiter", "backend_bytes",
        "close_reason", "declared_bytes", "name", "session", "started_at", "stuck_chunks",
        "stuck_since", "traffic",
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
        # The runner's __anext__, made on the first call (see _run); a stream never iterated
        # never makes one.
        self._runner: AsyncIterator[T] | None = None
        self._next: Callable[[], Awaitable[T]] | None = None
        self._sizer = sizer
        self._waiter: asyncio.Task[Any] | None = None
        self._cancel_sent = False
        self._close_requested: CloseReason | None = None
        self._closed = False
        self._stopping = False  # any of the three above: the runner's one check per chunk
        self.session = session
        self.name = name or type(source).__name__
        self.started_at = time.monotonic()
        self.stuck_chunks = -1  # sampler bookkeeping for chunk timeouts
        self.stuck_since = 0.0
        # Chunks and bytes out, counted per chunk (compiled where built: no int per chunk).
        self.traffic: hotpath.Traffic = hotpath.new_traffic()
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
                self._stopping = True
            self._on_session = session.add_stream(self)

    # Traffic: chunks delivered and their sizes as ``sizer`` measures them, in ``traffic``.
    chunks = hotpath.TrafficCounter("traffic", "chunks")
    bytes_out = hotpath.TrafficCounter("traffic", "bytes")

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

    def __aiter__(self) -> AsyncIterator[T]:
        """The iterator ``async for`` drives: the stream's runner (see :meth:`_run`).

        ``async for`` then resumes the runner directly for each chunk, without a Python-level
        ``__anext__`` call in between; :meth:`__anext__` drives the same runner.
        """
        return self._runner_of()

    def __anext__(self) -> Awaitable[T]:
        """The next chunk, as an async generator's ``__anext__`` returns it (an awaitable)."""
        next_chunk = self._next
        if next_chunk is None:
            next_chunk = self._runner_of().__anext__
        return next_chunk()

    def _runner_of(self) -> AsyncIterator[T]:
        """The one runner of this stream, made on first use (a stream never iterated has none).

        The compiled runner (:mod:`llm_guard_sdk.hotpath`) where it is built and the chunks are
        measured the default way; else :meth:`_run`, the reference it follows step by step.
        """
        runner = self._runner
        if runner is None:
            native = hotpath.native
            if native is not None and hotpath.compiled(self.traffic) and \
                    self._sizer is default_sizer and self._held is None:
                loop = _get_running_loop()
                runner = native.ChunkRunner(self, self.traffic, self._it, loop, _tasks_of_loops)
            else:
                runner = cast("AsyncGeneratorType[T, None]", self._run())
            self._runner = runner
            self._next = runner.__anext__
        return runner

    async def _run(self) -> AsyncGenerator[T, None]:
        """The chunks of the source, counted; every way out ends in :meth:`_finish`.

        An async generator because resuming one per chunk costs about a third of the coroutine
        an ``async def __anext__`` creates per call. Per chunk: one flag check before and one
        after the source's await (``_stopping``: closed, close requested or our cancel sent),
        the consuming task noted with one dict lookup (so :meth:`request_close` can cancel the
        exact await it is blocked on; ``asyncio.current_task()`` would make a ``getpid()``
        syscall on 3.11), two counters. No clock reads. The guard stopping the stream ends it
        with StopAsyncIteration (``return``); an error in the source is raised as it is.
        """
        anext = self._it.__anext__
        sizer, held = self._sizer, self._held
        inline = sizer is default_sizer  # bytes and str are measured inline, others by sizer
        sized_types = _SIZED_TYPES
        traffic = self.traffic
        loop = _get_running_loop()  # once per stream; None outside asyncio: no task to cancel
        task_of = _task_of if loop is not None else _no_task
        while not self._stopping:
            task = self._waiter = task_of(loop)
            try:
                item = await anext()
            except StopAsyncIteration:
                self._waiter = None
                self._absorb_cancel(task)
                await self._finish(self._close_requested or CloseReason.COMPLETED)
                return
            except asyncio.CancelledError:
                self._waiter = None
                if self._cancel_sent and task is not None:
                    self._cancel_sent = False
                    if task.uncancel() == 0:
                        # Our own cancellation: end the stream quietly so the response finishes.
                        await self._finish(self._close_requested or CloseReason.EVICTED)
                        return
                session = self.session
                reason = session.close_reason if session and session.close_reason else None
                await self._finish(reason or CloseReason.ERROR)
                raise
            except BaseException:
                self._waiter = None
                await self._finish(CloseReason.ERROR)
                raise
            self._waiter = None
            if self._stopping:
                # Closed while the chunk was in flight (the source may have swallowed our
                # cancel): drop the chunk rather than deliver it after close.
                self._absorb_cancel(task)
                break
            traffic.chunks += 1
            # Traffic only: a sent chunk is not held memory.
            traffic.bytes += (len(item) if inline and type(item) in sized_types  # type: ignore[arg-type]
                              else sizer(item))
            if held is not None:
                try:
                    self.declare_held(held())
                except BaseException:
                    await self._finish(CloseReason.ERROR)
                    raise
            yield item
        if not self._closed:
            await self._finish(self._close_requested or CloseReason.COMPLETED)

    # The compiled runner's ends, each the matching branch of _run (it calls them by name).

    async def _source_ended(self, exc: BaseException, task: asyncio.Task[Any] | None) -> T:
        """The source's await raised ``exc``: end as :meth:`_run` does, then raise."""
        self._waiter = None
        if isinstance(exc, StopAsyncIteration):
            self._absorb_cancel(task)
            await self._finish(self._close_requested or CloseReason.COMPLETED)
            raise StopAsyncIteration
        if isinstance(exc, asyncio.CancelledError):
            if self._cancel_sent and task is not None:
                self._cancel_sent = False
                if task.uncancel() == 0:
                    await self._finish(self._close_requested or CloseReason.EVICTED)
                    raise StopAsyncIteration
            session = self.session
            reason = session.close_reason if session and session.close_reason else None
            await self._finish(reason or CloseReason.ERROR)
            raise exc
        await self._finish(CloseReason.ERROR)
        raise exc

    async def _late_chunk(self, task: asyncio.Task[Any] | None) -> T:
        """A chunk arrived after the stream was stopped: dropped, the stream ends."""
        self._absorb_cancel(task)
        return await self._after_stop()

    async def _after_stop(self) -> T:
        """``__anext__`` once the stream stopped: close it if not yet, then the end."""
        if not self._closed:
            await self._finish(self._close_requested or CloseReason.COMPLETED)
        raise StopAsyncIteration

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
        self._stopping = True
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
        self._closed = self._stopping = True
        self.close_reason = reason
        session = self.session
        try:
            aclose = getattr(self._it, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            if session is not None and self._on_session:
                session.remove_stream(self, reason)
            runner = self._runner
            if isinstance(runner, AsyncGeneratorType):
                if not runner.ag_running and runner.ag_frame is not None:
                    # Closed from outside between chunks: end the runner too, so no async
                    # generator is left suspended (inside it, or running, it returns by itself).
                    await runner.aclose()
            elif runner is not None:
                # The compiled runner refers to this stream; dropping the way back frees the
                # stream (and its session) by reference counting, as the async generator's
                # finished frame does, not at the next garbage collection. A later __anext__
                # on it, or a new one, still ends at once (the stream is stopped).
                self._runner = self._next = None


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
