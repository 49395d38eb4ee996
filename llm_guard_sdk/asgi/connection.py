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
  While the app itself waits in ``receive()`` with nothing queued and no guarded stream open,
  there is no pump at all: the app's call reads the server directly and does the pump's work
  (:mod:`llm_guard_sdk.asgi.websocket`), so an idle WebSocket keeps no task.

Either way the bytes the pump holds are the session's ``buffered_bytes``. All per-request state
lives on these per-connection objects, never on the middleware.

**Dead peers.** A client that stops reading fills its socket buffer and the server's ``send``
then waits for the drain forever. Each ``send`` only counts itself and notes the task inside
it (no timer, no clock read); the guard's :class:`~llm_guard_sdk.actions.DeadPeers` check sees
a send stuck past ``send_timeout`` and closes the session as ``send_timeout``. Nothing more is
sent to that peer (a close frame or the end of the body would block the same way): the app is
told the client is gone, and the stuck send itself is abandoned with a
:class:`~llm_guard_sdk.errors.PeerGoneError` (an ``OSError``, as ASGI 2.4 servers raise for a
closed connection) at once for a WebSocket, after ``close_grace`` for HTTP, where frameworks
that listen for the disconnect (Starlette, Litestar) cancel their own send first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from types import CoroutineType
from typing import Any

from llm_guard_sdk.asgi.inbox import IDLE_INBOX, Inbox
from llm_guard_sdk.errors import PeerGoneError
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.types import Message, Receive, Send

_SEND_FRAMES = frozenset({"send", "forward"})  # coroutine frames of ours a send runs in


class Connection:
    """Shared pump/inbox machinery for HTTP and WebSocket connections.

    ``__slots__`` throughout: an idle WebSocket keeps its connection object for hours, so
    10,000 of them should cost little (see ``benchmarks/ws_scale.py``).
    """

    __slots__ = ("__weakref__", "_abandoned", "_inbox", "_pump", "_receive", "_send",
                 "_stuck_sends", "_stuck_since", "_terminator", "finished", "guard", "in_send",
                 "pending_send", "pump_reading", "sends", "session", "terminated")

    disconnect_type = ""

    def __init__(self, guard: Guard, session: Session, receive: Receive, send: Send) -> None:
        self.guard = guard
        self.session = session
        self._receive = receive
        self._send = send
        self._inbox = IDLE_INBOX  # read-only until this connection needs its own (_own_inbox)
        self._pump: asyncio.Task[None] | None = None
        self._terminator: asyncio.Task[None] | None = None
        self.terminated = False  # the guard ended the connection; app sends are dropped
        self.finished = False  # the app returned; nothing more is sent or started
        self.pump_reading = False  # the pump is inside the server's receive
        self.in_send = False  # inside the server's send, in a frame of ours (forward)
        # The server's coroutine of the last send made without a frame of ours (an HTTP body
        # chunk, HttpConnection.send), kept until the next one: in flight while suspended.
        self.pending_send: CoroutineType[Any, Any, None] | None = None
        # Sends other than body chunks / data frames, which the session counts (chunks_out):
        # together they number every send, so the hot path counts each chunk once.
        self.sends = 0
        self._stuck_sends = -1
        self._stuck_since = 0.0
        self._abandoned: asyncio.Task[object] | None = None  # the task abandon_send cancelled
        session.bind_connection(self)
        guard.dead_peers.watch(self)

    def watch(self) -> None:
        """Start the pump: read ``receive`` in the background to notice disconnects (idempotent)."""
        if self._pump is None and not self.finished:
            # Unnamed: a name string per idle connection adds up; the coroutine says what it is.
            self._pump = asyncio.get_running_loop().create_task(self._run_pump())

    async def finish(self) -> None:
        """The app returned: end the pump and any pending terminator; send nothing more.

        The tasks are cancelled before the first await, so they end even if this caller is
        cancelled while waiting for them; a task that failed is counted, never re-raised.
        """
        self.finished = self.terminated = True
        self.guard.dead_peers.forget(self)
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
        inbox = self._own_inbox()
        if message["type"] == self.disconnect_type:
            inbox.finish(message, drop_pending=drop_pending)
        else:
            inbox.put(message)
        self.session.buffered_bytes = inbox.bytes

    async def receive(self) -> Message:
        """The app's ``receive``: forwarded messages in order, to any number of callers."""
        if self._pump is None:
            self.watch()
        inbox = self._own_inbox()
        message = await inbox.get()
        self.session.buffered_bytes = inbox.bytes
        return message

    def _own_inbox(self) -> Inbox:
        """This connection's inbox, made on first write (the shared idle one is read-only)."""
        inbox = self._inbox
        if inbox is IDLE_INBOX:
            inbox = self._inbox = Inbox()
        return inbox

    def send(self, message: Message) -> Awaitable[None]:
        """The app's ``send``; each kind of connection counts its own messages first."""
        return self.forward(message)

    @property
    def app_send(self) -> Send:
        """The ``send`` to hand the app: :meth:`send`, or a compiled one that does the same."""
        return self.send

    def may_read_ahead(self) -> bool:
        """Whether the pump may read another message before the app took the last one."""
        return True

    async def _run_pump(self) -> None:
        session = self.session
        try:
            while True:
                while not self.may_read_ahead():
                    await self._inbox.drained()
                if not self.keep_pumping():
                    return  # handed over: the app reads the server itself from now on
                self.pump_reading = True
                try:
                    message = await self._receive()
                finally:
                    self.pump_reading = False
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

    def keep_pumping(self) -> bool:
        """Checked before each read: False ends the pump without a disconnect (a hand-over)."""
        return True

    def count_in(self, message: Message) -> None:
        """Account an inbound message to the session."""

    async def check_inbound(self) -> None:
        """Called after each queued message: act on what the app has not taken yet."""

    async def on_client_disconnect(self) -> None:
        """The client went away."""
        await self.guard.close_session(self.session, CloseReason.DISCONNECTED)

    async def close(self, reason: CloseReason) -> None:
        """The guard closed the session (eviction, idle timeout); end the connection."""

    @property
    def sending(self) -> bool:
        """Whether a send is in flight: in a frame of ours, or the pending one suspended."""
        return self.in_send or self.send_in_flight() is not None

    def stalled_for(self, now: float) -> float:
        """Seconds the current send has been stuck, from the first check that saw it (0: none).

        A send is known by its number, ``sends + session.chunks_out`` (each send adds one to
        either), so the hot path keeps no counter of its own.
        """
        if not self.sending:
            self._stuck_sends = -1
            return 0.0
        started = self.sends + self.session.chunks_out
        if started != self._stuck_sends:
            self._stuck_sends, self._stuck_since = started, now
            return 0.0
        return now - self._stuck_since

    def abandon_send(self) -> None:
        """Cancel the send stuck on a dead peer (no-op if none).

        Inside a frame of ours (:meth:`forward`, a WebSocket frame) the cancel becomes a
        :class:`PeerGoneError` there; an HTTP body chunk is handed to the server without a
        frame of ours (:meth:`HttpConnection.send`), so the app sees the cancel and the
        middleware ends the request quietly (:meth:`absorbs_cancel`). The hot path does not
        note which task sends (``asyncio.current_task`` costs more than the rest of a send on
        Python 3.11); the task is found here, rarely, by what it is suspended in.
        """
        task = self.sending_task() if self.sending else None
        if task is not None:
            self._abandoned = task
            task.cancel("llm-guard: send timeout")

    def sending_task(self) -> asyncio.Task[object] | None:
        """The task suspended inside this connection's ``send``, if any."""
        target = self.send_in_flight()
        for task in asyncio.all_tasks():
            coro: object = task.get_coro()
            while coro is not None:
                if coro is target:
                    return task
                frame = getattr(coro, "cr_frame", None)
                if frame is not None and frame.f_code.co_name in _SEND_FRAMES and \
                        frame.f_locals.get("self") is self:
                    return task
                coro = getattr(coro, "cr_await", None)
        return None

    def send_in_flight(self) -> object:
        """The server's coroutine of a send made without a frame of ours, while suspended."""
        sent = self.pending_send
        return sent if sent is not None and sent.cr_await is not None else None

    async def forward(self, message: Message) -> None:
        """Pass ``message`` to the server's ``send``, marked in flight for the dead-peer watch."""
        self.sends += 1
        self.in_send = True
        try:
            await self._send(message)
        except asyncio.CancelledError:
            self.raise_if_abandoned()
            raise
        finally:
            self.in_send = False

    def raise_if_abandoned(self) -> None:
        """Called with a send's CancelledError: turn the guard's own cancel into PeerGoneError.

        A cancel someone else asked for as well (anyio's cancel scope) stays a cancel.
        """
        if self.absorbs_cancel():
            raise PeerGoneError("llm-guard: send timed out; the client stopped reading")

    def absorbs_cancel(self) -> bool:
        """Called with a CancelledError: True if it is only the guard's cancel of a stuck send.

        The current task must be the one :meth:`abandon_send` cancelled and no one else may
        have asked for a cancel as well (``uncancel()`` back to 0); the guard's request is
        consumed by that task either way.
        """
        task = asyncio.current_task()
        if task is None or task is not self._abandoned:
            return False
        self._abandoned = None
        return task.uncancel() == 0

    async def _abandon_send_later(self) -> None:
        await asyncio.sleep(self.guard.config.close_grace)
        self.abandon_send()
