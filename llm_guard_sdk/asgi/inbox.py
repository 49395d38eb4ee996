"""The inbox between the receive pump and the app: FIFO, many concurrent readers, a final message.

ASGI apps often read ``receive`` from more than one task at a time: Starlette's
``StreamingResponse`` (spec 2.3) runs ``listen_for_disconnect`` while the handler's generator
calls ``await request.is_disconnected()``, which calls ``receive()`` inside an already cancelled
scope; other code wraps ``receive()`` in ``wait_for`` / ``move_on_after``. So the inbox follows
:class:`asyncio.Queue`'s discipline rather than keeping one waiter: messages stay in the queue
and readers only wait for a wake-up, one per message, in the order they started waiting. A
reader cancelled after it was woken passes its wake-up on, so a cancelled ``receive()`` never
loses or duplicates a message.

The final message (``http.disconnect`` / ``websocket.disconnect``) wakes *every* reader; once the
messages before it are delivered, every later read answers it again (ASGI: after a disconnect,
``receive`` keeps returning it), and messages that arrive after it are dropped.

It is not an ``asyncio.Queue`` because of that final message and because it counts the bytes it
holds, which the session reports as ``buffered_bytes``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from llm_guard_sdk.types import Message


def message_size(message: Message) -> int:
    """Payload bytes of an inbound message (request body or WebSocket frame), else 0."""
    payload = message.get("body") or message.get("bytes") or message.get("text") or b""
    return len(payload)


class Inbox:
    """Messages read from the server and not yet taken by the app, with their byte total.

    Small when idle, because an idle WebSocket keeps one for hours: the queue exists only while
    it holds messages, the readers are a short list made when one waits (one app reader, rarely
    a few; an empty tuple until then), and the wait for "drained" is a future made only when
    the pump waits for it. (Two deques and an ``asyncio.Event`` cost ~2.3 KiB per connection.)
    """

    __slots__ = ("_drained", "_final", "_queue", "_readers", "bytes")

    def __init__(self) -> None:
        self._queue: deque[tuple[Message, int]] | None = None
        self._readers: list[asyncio.Future[None]] | tuple[()] = ()  # a list once one waits
        self._drained: asyncio.Future[None] | None = None
        self._final: Message | None = None
        self.bytes = 0
        """Payload bytes held (see :func:`message_size`)."""

    @property
    def pending(self) -> int:
        """Messages held, not counting the final one."""
        return len(self._queue) if self._queue is not None else 0

    @property
    def final(self) -> Message | None:
        """The final message once it arrived, else None."""
        return self._final

    @property
    def readers(self) -> int:
        """How many ``get`` calls are waiting now."""
        return len(self._readers)

    def put(self, message: Message) -> None:
        """Queue ``message`` for the app and wake one reader; dropped after the final message."""
        if self._final is not None:
            return
        size = message_size(message)
        if self._queue is None:
            self._queue = deque()
        self._queue.append((message, size))
        self.bytes += size
        self._wake_one()

    def finish(self, message: Message, *, drop_pending: bool = False) -> bool:
        """Deliver ``message`` after what is queued, then forever; wake every reader.

        ``drop_pending`` discards what is still queued (the guard closed the connection to free
        it). Returns False when a final message was already set (the first one wins).
        """
        if self._final is not None:
            return False
        self._final = message
        if drop_pending:
            self._queue = None
            self.bytes = 0
            self._set_drained()
        readers, self._readers = self._readers, ()
        for reader in readers:
            if not reader.done():
                reader.set_result(None)
        return True

    async def get(self) -> Message:
        """The next message, in order; the final one once the queue is empty."""
        while not self._queue:
            if self._final is not None:
                return self._final
            reader = asyncio.get_running_loop().create_future()
            if isinstance(self._readers, list):
                self._readers.append(reader)
            else:
                self._readers = [reader]
            try:
                await reader
            except BaseException:
                reader.cancel()
                if isinstance(self._readers, list):
                    with contextlib.suppress(ValueError):
                        self._readers.remove(reader)
                if not reader.cancelled():
                    self._wake_one()  # woken, then cancelled: the next reader takes the message
                raise
        message, size = self._queue.popleft()
        self.bytes -= size
        if not self._queue:
            self._queue = None
            self._set_drained()
        return message

    async def drained(self) -> None:
        """Wait until the app has taken every queued message (or they were dropped)."""
        if not self._queue:
            return
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._drained)

    def _set_drained(self) -> None:
        waiter, self._drained = self._drained, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_one(self) -> None:
        readers = self._readers
        while isinstance(readers, list) and readers:
            reader = readers.pop(0)
            if not reader.done():
                reader.set_result(None)
                return


IDLE_INBOX = Inbox()
"""The one empty inbox every connection starts with, never written to: a connection makes its
own when a message is queued or a reader waits (an idle WebSocket that reads directly never
does, and keeps 72 B less)."""
