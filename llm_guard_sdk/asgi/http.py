"""One HTTP request/response behind a session.

Body counting, the end of the response, and how the guard ends a response it closed (see
:mod:`llm_guard_sdk.asgi.connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from types import CoroutineType

from llm_guard_sdk import hotpath
from llm_guard_sdk.asgi.connection import Connection
from llm_guard_sdk.asgi.responses import shed_http
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.types import Message, Receive, Send


class HttpConnection(Connection):
    """One HTTP request/response."""

    __slots__ = ("_native_send", "body_complete", "response_complete", "response_started")

    disconnect_type = "http.disconnect"

    def __init__(self, guard: Guard, session: Session, receive: Receive, send: Send) -> None:
        super().__init__(guard, session, receive, send)
        self.response_started = False
        self.response_complete = False
        self.body_complete = False
        # The same send in C (llm_guard_sdk/_hotpath.c), counting into the session's pair.
        self._native_send: Send | None = None
        if hotpath.native is not None and hotpath.compiled(session.out):
            self._native_send = hotpath.native.BodySend(self, session.out, send, self.send,
                                                        self._watched)

    async def finish(self) -> None:
        """As :meth:`Connection.finish`; also lets go of the compiled send and the last chunk.

        The compiled send refers to this connection: dropping the way back frees both by
        reference counting when the app lets go of its ``send``, not at the next collection.
        """
        self._native_send = None
        self.pending_send = None
        await super().finish()

    @property
    def app_send(self) -> Send:
        """The compiled :meth:`send` where it is built (no Python frame per chunk), else it."""
        return self._native_send or self.send

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

    def send(self, message: Message) -> Awaitable[None]:
        """The app's ``send``: counts body bytes, notices the end of the response.

        Hot path: one call per streamed chunk. Not a coroutine: a body chunk is counted and
        the server's own awaitable is returned for the app to await, so no frame of ours sits
        between the app and the server per chunk (a coroutine per chunk cost more than all
        the counting). The dead-peer watch still sees a stuck chunk: the server's coroutine is
        kept until the next send and is in flight while suspended (:attr:`sending`);
        everything else, and any send after the guard ended the response, goes through
        :meth:`_send_other`.
        """
        if message["type"] != "http.response.body" or self.terminated:
            return self._send_other(message)
        # Subscripts rather than ``dict.get`` calls: both keys are optional in ASGI, but a
        # method call per key costs more than the rest of the counting.
        out = self.session.out
        out.bytes += len(message["body"]) if "body" in message else 0
        out.chunks += 1  # also the session's activity and this send's number
        if "more_body" not in message or not message["more_body"]:
            self.response_complete = True
        sent = self._send(message)
        if sent.__class__ is not CoroutineType:  # a server whose send is no coroutine
            return self._watched(sent)
        self.pending_send = sent
        return sent

    async def _watched(self, sent: Awaitable[None]) -> None:
        """A body chunk to a server whose ``send`` returns no coroutine, awaited here.

        In a frame of ours, so the dead-peer watch still knows when it is in flight.
        """
        self.in_send = True
        try:
            await sent
        except asyncio.CancelledError:
            self.raise_if_abandoned()
            raise
        finally:
            self.in_send = False

    async def _send_other(self, message: Message) -> None:
        """Messages other than body chunks: the response start gets the session id header.

        After the guard ended the response (:attr:`terminated`) nothing more is sent.
        """
        if self.terminated:
            return
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
