"""One WebSocket connection behind a session.

Frame counting, the inbound limit, the close code a client can act on when the guard ends it
(see :mod:`llm_guard_sdk.asgi.connection`), and who reads the server's ``receive``.

**Pump-less while idle.** An idle chat connection spends hours with its app waiting in
``receive()``; a receive pump task for each would be most of what the guard keeps per session
(~850 B of 3.2 KiB, see ``benchmarks/ws_scale.py``). So while the app itself waits in
``receive()``, nothing is queued and no guarded stream is open, the app's own call reads the
server's ``receive`` directly, in the app's task, doing what the pump does with each message:
counting the frame, and on ``websocket.disconnect`` closing the session as ``disconnected``.
The pump runs only while someone must read and the app does not: from one loop turn after the
app took a frame and did not call ``receive()`` again (it is busy answering: a disconnect or a
flood must still be seen, see the inbound limit), and while a guarded stream is open. There is
never more than one reader of the server's ``receive``:

* app -> pump: the pump starts only when no direct read is in flight.
* pump -> app: an app ``receive()`` that may read directly asks the pump to stop before its
  next read, cancels the read the pump is suspended in (a server's ``receive`` survives a cancel
  as apps rely on: ``wait_for(receive())``, Starlette's ``listen_for_disconnect``), waits until
  it ended, and only then reads.
* Several app readers: only one reads directly; the others wait in the inbox, and the pump
  serves them once the direct read returned.

When the guard closes the connection (eviction, idle timeout, dead peer) while the app's task
is inside the server's ``receive``, that read is cancelled and answers the guard's
``websocket.disconnect`` instead (a cancel the app asked for as well stays a cancel). A message
the server already returned is never lost: it is handed to the app in the same step.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from llm_guard_sdk.asgi.connection import Connection
from llm_guard_sdk.asgi.responses import WS_GOING_AWAY, WS_MESSAGE_TOO_BIG, WS_TRY_AGAIN_LATER
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import CloseReason, Session, SessionState
from llm_guard_sdk.types import Message, Receive, Send

WS_ABNORMAL_CLOSURE = 1006  # what the app is told for a dead peer: no close frame was exchanged
_WS_CLOSE = {
    CloseReason.EVICTED: (WS_TRY_AGAIN_LATER, "llm-guard: evicted under memory pressure"),
    CloseReason.IDLE_TIMEOUT: (WS_GOING_AWAY, "llm-guard: idle timeout"),
    CloseReason.INBOUND_OVERFLOW: (WS_MESSAGE_TOO_BIG, "llm-guard: inbound buffer full"),
    CloseReason.PING_TIMEOUT: (1011, "llm-guard: ping timeout"),
}


class WebSocketConnection(Connection):
    """One WebSocket connection; idle between streams, evictable as a whole."""

    __slots__ = ("_handing_over", "_reader", "_waking", "accepted", "closed")

    disconnect_type = "websocket.disconnect"

    def __init__(self, guard: Guard, session: Session, receive: Receive, send: Send) -> None:
        super().__init__(guard, session, receive, send)
        self.accepted = False
        self.closed = False
        self._reader: asyncio.Task[Any] | None = None  # the app task inside the server's receive
        self._handing_over = False  # the pump is asked to stop: the app reads directly
        self._waking = False  # the guard cancelled the direct read to deliver its close

    @property
    def reading_directly(self) -> bool:
        """Whether an app task is reading the server's ``receive`` itself (no pump needed)."""
        return self._reader is not None

    @property
    def pumping(self) -> bool:
        """Whether the receive pump task is running."""
        return self._pump is not None and not self._pump.done()

    def watch(self) -> None:
        """Make sure someone reads the server: an app task reading directly does, else the pump."""
        if self._reader is None and self._inbox.final is None:
            super().watch()

    def keep_pumping(self) -> bool:
        """The pump stops before its next read once an app ``receive()`` takes over."""
        return not self._handing_over

    def push(self, message: Message, *, drop_pending: bool = False) -> None:
        """Queue for the app; a final message also wakes an app task reading directly."""
        super().push(message, drop_pending=drop_pending)
        reader = self._reader
        if reader is not None and message["type"] == self.disconnect_type and not self._waking:
            self._waking = True
            reader.cancel("llm-guard: connection closed")

    async def finish(self) -> None:
        """The app returned: a task it left reading directly is told the connection ended."""
        if self._reader is not None:
            self.push({"type": self.disconnect_type, "code": WS_ABNORMAL_CLOSURE})
        await super().finish()

    async def receive(self) -> Message:
        """The app's ``receive``: a direct read of the server when idle, else the inbox.

        One coroutine for the direct read (no helper): it is what an idle session keeps.
        """
        while True:
            if not self._may_read_directly():
                self.watch()  # someone must read for this caller: the direct reader or the pump
                message = await self._own_inbox().get()
                self.session.buffered_bytes = self._inbox.bytes
                return message
            pump = self._pump
            if pump is None:
                break
            await self._hand_over(pump)
        self._reader = task = asyncio.current_task()
        try:
            message = await self._receive()
        except asyncio.CancelledError:
            self._reader = None
            woken, self._waking = self._waking, False
            if not woken or task is None or task.uncancel():
                raise  # the app's own cancel (the guard's final message waits in the inbox)
            return await self._own_inbox().get()
        except Exception:
            # The server's receive failed: treat as a disconnect so nothing waits forever.
            message = {"type": self.disconnect_type, "code": WS_ABNORMAL_CLOSURE}
        self._reader = None
        if self._waking:  # the guard closed meanwhile and the server answered anyway
            self._waking = False
            if task is not None:
                task.uncancel()
            return await self._own_inbox().get()  # the guard's final; a late frame: dropped
        if message["type"] == self.disconnect_type:
            self.push(message)
            try:
                await self.on_client_disconnect()
            except Exception:
                self.guard.record_internal_error("disconnect")
            return message
        self.count_in(message)
        self.session.last_activity = time.monotonic()
        if self._inbox.readers:
            self.watch()  # other app readers wait: the pump reads for them
        else:
            asyncio.get_running_loop().call_soon(self._watch_if_not_reading)
        return message

    def _may_read_directly(self) -> bool:
        """Idle: nothing queued or final, no other reader, no guarded stream, app running."""
        inbox = self._inbox
        return (self._reader is None and not inbox.pending and inbox.final is None
                and not inbox.readers and not self.session.stream_count and not self.finished)

    async def _hand_over(self, pump: asyncio.Task[None]) -> None:
        """Stop the pump so the caller can read directly; returns once it ended."""
        self._handing_over = True
        if self.pump_reading:
            pump.cancel("llm-guard: the app reads directly")
        try:
            await asyncio.wait((pump,))
        finally:
            if pump.done():
                self._pump_ended(pump)
            else:  # this caller was cancelled: once the pump ended, it reads again
                pump.add_done_callback(self._pump_ended_unread)

    def _pump_ended(self, pump: asyncio.Task[None]) -> None:
        if self._pump is not pump:
            return
        self._pump = None
        self._handing_over = False
        if not pump.cancelled() and pump.exception() is not None:
            self.guard.record_internal_error("connection task")

    def _pump_ended_unread(self, pump: asyncio.Task[None]) -> None:
        self._pump_ended(pump)
        self._watch_if_not_reading()

    def _watch_if_not_reading(self) -> None:
        """A loop turn after the app took a frame: if it is not reading, the pump reads."""
        if not self.finished:
            self.watch()

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
        """The app's ``send``: counts frames, tracks accept/close.

        Hot path: one call per streamed frame, counted and handed to the server in this one
        frame (the send watch of :meth:`Connection.forward` inlined, as in
        :meth:`HttpConnection.send`); everything else goes through :meth:`_send_other`.
        """
        if self.terminated:
            return
        if message["type"] != "websocket.send":
            await self._send_other(message)
            return
        data = message.get("bytes") or message.get("text") or b""
        session = self.session
        out = session.out
        out.bytes += len(data)
        out.chunks += 1
        if session.state is SessionState.IDLE:  # a frame outside a guarded stream: LRU order
            self.guard.registry.touch(session)
        # (Active: the count is the activity; the tick turns it into a time.)
        # Connection.forward, inlined: a call per chunk would cost one more coroutine.
        self.in_send = True  # (this send's number for the dead-peer watch: chunks_out above)
        try:
            await self._send(message)
        except asyncio.CancelledError:
            self.raise_if_abandoned()
            raise
        finally:
            self.in_send = False

    async def _send_other(self, message: Message) -> None:
        """Accept, close and the rest: noted, then forwarded."""
        kind = message["type"]
        if kind == "websocket.accept":
            self.accepted = True
        elif kind in ("websocket.close", "websocket.http.response.start"):
            self.closed = True
        await self.forward(message)

    async def close(self, reason: CloseReason) -> None:
        """Close the socket with a code and reason the client can act on; tell the app."""
        if reason is CloseReason.DISCONNECTED or self.closed:
            return
        if reason is CloseReason.SEND_TIMEOUT:  # a dead peer: a close frame would block too
            self.terminated = self.closed = True
            self.push({"type": "websocket.disconnect", "code": WS_ABNORMAL_CLOSURE})
            self.abandon_send()
            return
        code, text = _WS_CLOSE.get(reason, (WS_TRY_AGAIN_LATER, f"llm-guard: {reason.value}"))
        self.terminated = True
        self.closed = True
        # Bounded: a peer that stopped reading would block the close frame like any send.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.guard.config.send_timeout):
                await self._send({"type": "websocket.close", "code": code, "reason": text})
        # On overflow the unread frames are what must go; otherwise the app may still read them.
        self.push({"type": "websocket.disconnect", "code": code, "reason": text},
                  drop_pending=reason is CloseReason.INBOUND_OVERFLOW)
