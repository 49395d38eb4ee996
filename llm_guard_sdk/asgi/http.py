"""One HTTP request/response behind a session.

Body counting, the end of the response, and how the guard ends a response it closed (see
:mod:`llm_guard_sdk.asgi.connection`).
"""

from __future__ import annotations

import asyncio
import contextlib

from llm_guard_sdk.asgi.connection import Connection
from llm_guard_sdk.asgi.responses import shed_http
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.types import Message, Receive, Send


class HttpConnection(Connection):
    """One HTTP request/response."""

    __slots__ = ("body_complete", "response_complete", "response_started")

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
        """The app's ``send``: counts body bytes, notices the end of the response.

        Hot path: one call per streamed chunk. A body message is counted and handed to the
        server here, in this one frame (the send watch of :meth:`Connection.forward` inlined:
        a second coroutine per chunk costs as much as all the counting); everything else goes
        through :meth:`_send_other`.
        """
        if self.terminated:
            return
        if message["type"] != "http.response.body":
            await self._send_other(message)
            return
        # Subscripts rather than ``dict.get`` calls: both keys are optional in ASGI, but a
        # method call per key costs more than the rest of the counting.
        session = self.session
        session.bytes_out += len(message["body"]) if "body" in message else 0
        session.chunks_out += 1  # also the session's activity: the tick turns it into a time
        if "more_body" not in message or not message["more_body"]:
            self.response_complete = True
        # Connection.forward, inlined: a call per chunk would cost one more coroutine.
        self.sending = True  # (this send's number for the dead-peer watch: chunks_out above)
        try:
            await self._send(message)
        except asyncio.CancelledError:
            self.raise_if_abandoned()
            raise
        finally:
            self.sending = False

    async def _send_other(self, message: Message) -> None:
        """Messages other than body chunks: the response start gets the session id header."""
        if message["type"] == "http.response.start":
            self.response_started = True
            if self._pump is None:
                self.watch()
            message = {**message, "headers": [
                *message.get("headers", ()), (b"x-llm-guard-session", self.session.id.encode())
            ]}
        await self.forward(message)

    async def close(self, reason: CloseReason) -> None:
        """Tell the app the client is gone; end the response if the app does not within grace."""
        if reason is CloseReason.DISCONNECTED or self.response_complete:
            return
        if reason is CloseReason.SEND_TIMEOUT:  # a dead peer: nothing more can be sent
            self.terminated = self.response_complete = True
            self.push({"type": "http.disconnect"})
            if not self.finished:
                self._terminator = asyncio.get_running_loop().create_task(
                    self._abandon_send_later())
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
