"""One streaming HTTP exchange in a task of its own, so that closing it always closes it.

Why a task: the consumer of a guarded stream can be cancelled more than once (the guard cancels
a waiting consumer, an SSE reader is cancelled again by its response, anyio scopes re-cancel
every await). A second cancellation landing inside httpcore's own shielded clean-up leaves the
connection ACTIVE in the pool and the socket open, so the server never learns the client left
and generates to the end (seen with the demo under uvicorn). Here only :meth:`ResponsePump.close`
cancels the task, once; httpcore's clean-up then runs to the end and drops the connection,
whatever happens to the consumer meanwhile. The queue holds one chunk: back-pressure is kept
and what is buffered stays small and known (:attr:`ResponsePump.queued_bytes`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import anyio
import httpx

__all__ = ["MAX_ERROR_BODY", "Head", "ResponsePump"]

MAX_ERROR_BODY = 64 * 1024
"""Bytes of a non-2xx answer read for its message."""


class Head:
    """The status and content type of the answer; ``body`` is the (bounded) error body."""

    __slots__ = ("body", "content_type", "status")

    def __init__(self, status: int, content_type: str, body: bytes = b"") -> None:
        self.status, self.content_type, self.body = status, content_type, body


class ResponsePump:
    """Sends ``request`` and reads its body in its own task, one chunk ahead of the consumer.

    :meth:`head` then :meth:`chunk` (None at the end) re-raise what httpx raised.
    ``on_open``/``on_close`` run when the response is open and once it is closed.
    """

    def __init__(self, client: httpx.AsyncClient, request: httpx.Request, *,
                 on_open: Callable[[], None], on_close: Callable[[], None]) -> None:
        self.client, self.request = client, request
        self.on_open, self.on_close = on_open, on_close
        self.queue: asyncio.Queue[tuple[str, object]] = asyncio.Queue(maxsize=1)
        self.queued_bytes = 0
        """Body bytes read from the server and not yet handed to the consumer (at most two
        chunks: one queued, one waiting for room)."""
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the exchange (idempotent)."""
        if self.task is None:
            self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        response: httpx.Response | None = None
        try:
            response = await self.client.send(self.request, stream=True)
            self.on_open()
            head = Head(response.status_code, response.headers.get("content-type", ""))
            if response.status_code >= 400:
                head.body = await _read_bounded(response)
            await self.queue.put(("head", head))
            if response.status_code >= 400:
                return
            async for chunk in response.aiter_bytes():
                self.queued_bytes += len(chunk)  # queued, or waiting for room in the queue
                await self.queue.put(("data", chunk))
            await self.queue.put(("end", None))
        except Exception as exc:  # handed to the consumer; cancellation just ends the pump
            await self.queue.put(("error", exc))
        finally:
            if response is not None:
                with anyio.CancelScope(shield=True):
                    await response.aclose()  # unread body: the connection is dropped
                self.on_close()

    async def _get(self) -> tuple[str, object]:
        self.start()
        kind, value = await self.queue.get()
        if kind == "error":
            assert isinstance(value, BaseException)
            raise value
        if kind == "data":
            assert isinstance(value, bytes)
            self.queued_bytes -= len(value)  # handed out: the decoder holds what it keeps
        return kind, value

    async def head(self) -> Head:
        """The answer's status line, once it came."""
        kind, value = await self._get()
        assert kind == "head" and isinstance(value, Head)
        return value

    async def chunk(self) -> bytes | None:
        """The next body chunk, None at the end of the body."""
        kind, value = await self._get()
        return value if kind == "data" and isinstance(value, bytes) else None

    async def close(self) -> None:
        """Cancel the exchange once and wait for its clean-up (which finishes even if not)."""
        task = self.task
        if task is None:
            return
        if not task.done():
            task.cancel()
        with anyio.CancelScope(shield=True), contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait({task})


async def _read_bounded(response: httpx.Response) -> bytes:
    """At most :data:`MAX_ERROR_BODY` bytes of an error answer (enough for its message)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= MAX_ERROR_BODY:
            break
    return bytes(body[:MAX_ERROR_BODY])
