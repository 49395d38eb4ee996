"""One WebSocket connection behind a session.

Frame counting, the inbound limit, and the close code a client can act on when the guard ends
it (see :mod:`llm_guard_sdk.asgi.connection`).
"""

from __future__ import annotations

import asyncio
import contextlib

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

    __slots__ = ("accepted", "closed")

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
        session.bytes_out += len(data)
        session.chunks_out += 1
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
