"""Per-connection wiring: a receive pump that notices disconnects, and counting send/receive.

Only one task may read an ASGI ``receive``. The pump is that task: it forwards every message to
the app through an :class:`~llm_guard_sdk.asgi.inbox.Inbox` (any number of concurrent app
readers, each woken in turn, all woken by the disconnect), and the moment it sees
``http.disconnect`` / ``websocket.disconnect`` it closes the session, which stops the session's
guarded streams even while they are blocked waiting on the model (Starlette under ASGI spec 2.4
would only notice at the next ``send``).

How far the pump reads ahead, and why that still sees disconnects:

* **HTTP.** Servers apply back-pressure to request bodies: uvicorn pauses reading the socket
  above its high-water mark (64 KiB) until the app calls ``receive()`` again. A pump that read
  eagerly would defeat that and pull a whole upload into memory. So while the body is still
  arriving, the pump holds **at most one message** the app has not taken (under uvicorn: at most
  its high-water mark plus one socket read) and reads the next only once the app took it. Once
  the body is complete (``more_body`` false) the next message can only be ``http.disconnect``,
  so from then on the pump reads eagerly at no cost: a client that leaves while the app is busy
  streaming is seen at once. While a body is still arriving and the app is not reading it, a
  disconnect is not seen until the app reads again, exactly as without the guard (uvicorn's
  ``send`` drops writes to a gone client silently); flow control is worth more than that.
* **WebSocket.** ``websocket.disconnect`` queues behind unread frames, so the pump must read
  frames eagerly to see it. The frames the app has not taken are bounded instead: when more than
  one is queued and together they exceed ``max_inbound_buffer``, the guard drops them and closes
  the socket with 1009 (message too big), counted as ``sessions.inbound_overflow_total``. A
  single frame is always accepted (the server bounds it: uvicorn's ``--ws-max-size``).

Either way the bytes the pump holds are the session's ``buffered_bytes``. All per-request state
lives on these per-connection objects, never on the middleware.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from llm_guard_sdk.asgi.inbox import Inbox
from llm_guard_sdk.asgi.responses import (
    WS_GOING_AWAY,
    WS_MESSAGE_TOO_BIG,
    WS_TRY_AGAIN_LATER,
    shed_http,
)
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.types import Message, Receive, Send

_WS_CLOSE = {
    CloseReason.EVICTED: (WS_TRY_AGAIN_LATER, "llm-guard: evicted under memory pressure"),
    CloseReason.IDLE_TIMEOUT: (WS_GOING_AWAY, "llm-guard: idle timeout"),
    CloseReason.INBOUND_OVERFLOW: (WS_MESSAGE_TOO_BIG, "llm-guard: inbound buffer full"),
}


class Connection:
    """Shared pump/inbox machinery for HTTP and WebSocket connections."""

    disconnect_type = ""

    def __init__(self, guard: Guard, session: Session, receive: Receive, send: Send) -> None:
        self.guard = guard
        self.session = session
        self._receive = receive
        self._send = send
        self._inbox = Inbox()
        self._pump: asyncio.Task[None] | None = None
        self._terminator: asyncio.Task[None] | None = None
        self.terminated = False  # the guard ended the connection; app sends are dropped
        self.finished = False  # the app returned; nothing more is sent or started
        session.bind_connection(self)

    def watch(self) -> None:
        """Start the pump: read ``receive`` in the background to notice disconnects (idempotent)."""
        if self._pump is None and not self.finished:
            self._pump = asyncio.get_running_loop().create_task(
                self._run_pump(), name=f"llm-guard-pump-{self.session.id[:8]}")

    async def finish(self) -> None:
        """The app returned: end the pump and any pending terminator; send nothing more.

        The tasks are cancelled before the first await, so they end even if this caller is
        cancelled while waiting for them; a task that failed is counted, never re-raised.
        """
        self.finished = self.terminated = True
        tasks = [t for t in (self._pump, self._terminator) if t is not None]
        self._pump = self._terminator = None
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                self.guard.record_internal_error("connection task")

    def push(self, message: Message, *, drop_pending: bool = False) -> None:
        """Hand a message to the app's ``receive``; a disconnect is final (see :class:`Inbox`).

        ``drop_pending`` (disconnects only) discards the messages the app has not taken yet.
        """
        if message["type"] == self.disconnect_type:
            self._inbox.finish(message, drop_pending=drop_pending)
        else:
            self._inbox.put(message)
        self.session.buffered_bytes = self._inbox.bytes

    async def receive(self) -> Message:
        """The app's ``receive``: forwarded messages in order, to any number of callers."""
        if self._pump is None:
            self.watch()
        message = await self._inbox.get()
        self.session.buffered_bytes = self._inbox.bytes
        return message

    def may_read_ahead(self) -> bool:
        """Whether the pump may read another message before the app took the last one."""
        return True

    async def _run_pump(self) -> None:
        session = self.session
        try:
            while True:
                while not self.may_read_ahead():
                    await self._inbox.drained()
                message = await self._receive()
                if message["type"] == self.disconnect_type:
                    self.push(message)
                    break
                self.count_in(message)
                session.last_activity = time.monotonic()
                self.push(message)
                # A server may answer ``receive`` from its own buffer without suspending: let the
                # reader just woken take the message before the next read counts as unread.
                await asyncio.sleep(0)
                await self.check_inbound()
        except asyncio.CancelledError:
            raise
        except Exception:
            # The server's receive failed: treat as a disconnect so nothing waits forever.
            self.push({"type": self.disconnect_type, "code": 1006})
        try:
            await self.on_client_disconnect()
        except Exception:
            self.guard.record_internal_error("disconnect")

    def count_in(self, message: Message) -> None:
        """Account an inbound message to the session."""

    async def check_inbound(self) -> None:
        """Called after each queued message: act on what the app has not taken yet."""

    async def on_client_disconnect(self) -> None:
        """The client went away."""
        await self.guard.close_session(self.session, CloseReason.DISCONNECTED)

    async def close(self, reason: CloseReason) -> None:
        """The guard closed the session (eviction, idle timeout); end the connection."""


class HttpConnection(Connection):
    """One HTTP request/response."""

    disconnect_type = "http.disconnect"

    def __init__(self, guard: Guard, session: Session, receive: Receive, send: Send) -> None:
        super().__init__(guard, session, receive, send)
        self.response_started = False
        self.response_complete = False
        self.body_complete = False

    def count_in(self, message: Message) -> None:
        """Request body bytes; notes the end of the body."""
        body = message.get("body", b"")
        self.session.bytes_in += len(body)
        self.session.chunks_in += 1
        if not message.get("more_body", False):
            self.body_complete = True

    def may_read_ahead(self) -> bool:
        """One message ahead while the body arrives; freely after it (only a disconnect is left)."""
        return self.body_complete or not self._inbox.pending

    async def on_client_disconnect(self) -> None:
        """Uvicorn answers ``http.disconnect`` after a complete response; that is no drop."""
        if not self.response_complete:
            await super().on_client_disconnect()

    async def send(self, message: Message) -> None:
        """The app's ``send``: counts body bytes, notices the end of the response."""
        if self.terminated:
            return
        if message["type"] == "http.response.body":
            session = self.session
            session.bytes_out += len(message.get("body", b""))
            session.chunks_out += 1
            session.last_activity = time.monotonic()
            if not message.get("more_body", False):
                self.response_complete = True
        elif message["type"] == "http.response.start":
            self.response_started = True
            if self._pump is None:
                self.watch()
            message = {**message, "headers": [
                *message.get("headers", ()), (b"x-llm-guard-session", self.session.id.encode())
            ]}
        await self._send(message)

    async def close(self, reason: CloseReason) -> None:
        """Tell the app the client is gone; end the response if the app does not within grace."""
        if reason is CloseReason.DISCONNECTED or self.response_complete:
            return
        if not self.session.streams_total:
            # Nothing guarded to stop: tell the app at once (Starlette < 2.4 cancels on it).
            # (A guarded stream, even one closed already, ends by itself: the app can finish.)
            self.push({"type": "http.disconnect"})
        # Guarded streams end by themselves and let the app finish its response (an SSE app
        # can still send an "evicted" event); whatever is still running after the grace
        # period is told the client is gone and cut off.
        if not self.finished:
            self._terminator = asyncio.get_running_loop().create_task(
                self._terminate_later(reason))

    async def _terminate_later(self, reason: CloseReason) -> None:
        await asyncio.sleep(self.guard.config.close_grace)
        if self.finished:
            return
        self.push({"type": "http.disconnect"})
        await self.terminate(reason)

    async def terminate(self, reason: CloseReason) -> None:
        """End the response ourselves; later app sends are dropped."""
        if self.response_complete or self.terminated:
            return
        self.terminated = True
        self.response_complete = True
        with contextlib.suppress(Exception):
            if self.response_started:
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await shed_http(self._send, reason.value, self.guard.config.retry_after)


class WebSocketConnection(Connection):
    """One WebSocket connection; idle between streams, evictable as a whole."""

    disconnect_type = "websocket.disconnect"

    def __init__(self, guard: Guard, session: Session, receive: Receive, send: Send) -> None:
        super().__init__(guard, session, receive, send)
        self.accepted = False
        self.closed = False

    def count_in(self, message: Message) -> None:
        """Inbound frame bytes; activity keeps the session off the idle LRU's front."""
        if message["type"] == "websocket.receive":
            data = message.get("bytes") or message.get("text") or b""
            self.session.bytes_in += len(data)
            self.session.chunks_in += 1
            self.guard.registry.touch(self.session)

    async def check_inbound(self) -> None:
        """Frames the app is not reading past ``max_inbound_buffer``: close with 1009."""
        inbox = self._inbox
        if inbox.pending > 1 and inbox.bytes > self.guard.config.max_inbound_buffer:
            await self.guard.close_session(self.session, CloseReason.INBOUND_OVERFLOW)

    async def send(self, message: Message) -> None:
        """The app's ``send``: counts frames, tracks accept/close."""
        if self.terminated:
            return
        kind = message["type"]
        if kind == "websocket.send":
            data = message.get("bytes") or message.get("text") or b""
            self.session.bytes_out += len(data)
            self.session.chunks_out += 1
            self.guard.registry.touch(self.session)
        elif kind == "websocket.accept":
            self.accepted = True
        elif kind in ("websocket.close", "websocket.http.response.start"):
            self.closed = True
        await self._send(message)

    async def close(self, reason: CloseReason) -> None:
        """Close the socket with a code and reason the client can act on; tell the app."""
        if reason is CloseReason.DISCONNECTED or self.closed:
            return
        code, text = _WS_CLOSE.get(reason, (WS_TRY_AGAIN_LATER, f"llm-guard: {reason.value}"))
        self.terminated = True
        self.closed = True
        with contextlib.suppress(Exception):
            await self._send({"type": "websocket.close", "code": code, "reason": text})
        # On overflow the unread frames are what must go; otherwise the app may still read them.
        self.push({"type": "websocket.disconnect", "code": code, "reason": text},
                  drop_pending=reason is CloseReason.INBOUND_OVERFLOW)
