"""Django Channels adapter: ``guard_application(app)`` and guarded WebSocket / HTTP consumers.

.. code-block:: python

    from llm_guard_sdk.adapters.channels import GuardedWebsocketConsumer, guard_application

    class Chat(GuardedWebsocketConsumer):
        async def generate(self, request):          # one prompt -> its token stream
            return model.generate(request.prompt)

    application = guard_application(ProtocolTypeRouter({...}))  # the one line

:class:`~llm_guard_sdk.GuardMiddleware` is pure ASGI, so it wraps a ``ProtocolTypeRouter``
directly and sees every connection before Channels routes it. Consumers run in the middleware's
task, so ``current_session()`` works inside them; the session is also in
``scope["llm_guard.session"]``.

Channels dispatches one message at a time: while ``receive()`` or ``handle()`` streams an
answer, the consumer cannot see the client's disconnect (channels#1249). The middleware reads
the connection itself, so a disconnect (or an eviction) stops the guarded stream mid-``handle()``
and the model request with it.

``guard_application`` was first named ``guard``, a function whose ``guard=`` parameter shadowed
it; the old name still works for one release, with a DeprecationWarning (:mod:`.deprecation`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, Mapping
from typing import TYPE_CHECKING, Any

try:
    from channels.generic.http import AsyncHttpConsumer  # type: ignore[import-untyped]
    from channels.generic.websocket import (  # type: ignore[import-untyped]
        AsyncWebsocketConsumer,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    from llm_guard_sdk.errors import MissingDependencyError

    raise MissingDependencyError("Django Channels", "channels") from exc

from llm_guard_sdk.asgi.middleware import GuardMiddleware
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.errors import BackendError, PeerGoneError
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import Session

from .chat import ChatProtocol, ChatRequest, chat_settings, history_trimmer, serving_chat_settings
from .chat import max_message_bytes as message_limit
from .chat_context import ContextBudget
from .deprecation import deprecated_names
from .session_lookup import session_from_scope
from .sse import SSE_HEADERS, Framing, SSEEvents, encode_sse
from .wire import dumps

__all__ = ["ChatRequest", "ContextBudget", "GuardedHttpConsumer", "GuardedWebsocketConsumer",
           "guard_application"]


def guard_application(application: Any, config: GuardConfig | None = None, *,
                      guard: Guard | None = None) -> GuardMiddleware:
    """Wrap a Channels ``ProtocolTypeRouter`` (or any ASGI app) in :class:`GuardMiddleware`.

    Idempotent: an application that is already guarded is returned as it is.

    Args:
        application: The ASGI application, typically ``ProtocolTypeRouter({...})``.
        config: Settings; ``GuardConfig.from_env()`` when omitted.
        guard: A guard you built yourself (to start a backend with it, add sources, ...).

    Raises:
        ConfigError: Invalid settings (environment or ``config``), here, where the ASGI module
            is imported, so the server (uvicorn, Daphne) never starts with them.
    """
    if isinstance(application, GuardMiddleware):
        return application
    chosen = guard if guard is not None else Guard(config)
    chat_settings(chosen)
    return GuardMiddleware(application, guard=chosen)


if TYPE_CHECKING:  # the deprecated name, typed as what it aliases
    guard = guard_application
else:
    __getattr__ = deprecated_names(__name__, {"guard": "guard_application"}, globals())


class GuardedWebsocketConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """An ``AsyncWebsocketConsumer`` speaking the chat protocol, its lifecycle bound to a session.

    Override :meth:`generate`. ``connect`` accepts and binds the session (the conversation
    history is attached to it); each text frame ``{"prompt": ...}`` is answered with token
    frames and ``{"type": "done", "turns"}``; bad input follows the shared rules (1009 over
    ``max_message_bytes``, 1003 for binary frames or a ``"history"`` that is not a list of
    messages, an error frame for invalid JSON). The history is trimmed before each generation
    to ``context_budget`` (docs/context.md). On
    disconnect the middleware has already stopped the stream (aborting the model request);
    on eviction it closed the socket with 1013 and the reason, and the consumer then stops.
    """

    max_message_bytes: int | None = None
    """Overrides the guard's chat settings (:class:`ChatSettings`) for this consumer."""

    context_budget: ContextBudget | None = None
    """How this consumer trims its history (docs/context.md); None: the chat settings' budget."""

    llm_session: Session | None = None
    chat: ChatProtocol | None = None
    heartbeat_task: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        """Accept and bind the session; start the heartbeat if the chat settings ask for one."""
        self.llm_session = session_from_scope(self.scope)
        settings = serving_chat_settings()
        self.chat = ChatProtocol(self.generate, self._send_text, session=self.llm_session,
                                 max_bytes=message_limit(self.max_message_bytes),
                                 trimmer=history_trimmer(self.context_budget),
                                 heartbeat=settings.heartbeat())
        await self.accept()
        if settings.ping_interval is not None:  # Channels owns the receive loop: a task pings
            self.heartbeat_task = asyncio.get_running_loop().create_task(self._beat(self.chat))

    async def _beat(self, chat: ChatProtocol) -> None:
        """Ping while the client is silent; close it when it does not answer."""
        with contextlib.suppress(OSError):  # the client is gone: its disconnect ends us
            while True:
                wait = chat.next_wait()
                await asyncio.sleep(wait if wait is not None else chat.heartbeat.timeout)
                reject = await chat.on_silence()
                if reject is not None:
                    await self.close(code=reject.code, reason=reject.reason)
                    return

    async def disconnect(self, code: int) -> None:
        """The socket closed: stop the heartbeat."""
        task, self.heartbeat_task = self.heartbeat_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _send_text(self, text: str) -> None:
        await self.send(text_data=text)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Answer one frame; close with the code the shared rules give for bad input."""
        if self.chat is None:  # connect() was overridden without calling super()
            raise RuntimeError("GuardedWebsocketConsumer.connect() was not called")
        try:
            reject = await self.chat.on_frame(text_data, bytes_data)
        except OSError:  # ASGI 2.4: the client is gone; its disconnect stops the consumer
            return
        if reject is not None:
            await self.close(code=reject.code, reason=reject.reason)

    async def generate(self, request: ChatRequest) -> AsyncIterable[str]:
        """Return the token stream for one prompt; raise ValueError for a bad request."""
        raise NotImplementedError("subclasses of GuardedWebsocketConsumer implement generate()")


class GuardedHttpConsumer(AsyncHttpConsumer):  # type: ignore[misc]
    """An ``AsyncHttpConsumer`` that streams guarded Server-Sent Events from ``handle()``.

    Call :meth:`send_sse` from ``handle()``. Channels cannot dispatch ``http.disconnect`` while
    ``handle()`` runs; the middleware notices it and ends the stream, so ``send_sse`` returns
    and the model request is closed (see the module docstring).
    """

    async def send_sse(self, source: AsyncIterable[Any], *, ping: float | None = 15.0,
                       event_type: str | None = None, wait_first: bool = False,
                       headers: Mapping[str, str] | None = None,
                       framing: Framing | None = None, retry: int | None = None,
                       event_ids: bool = False) -> None:
        """Stream ``source`` as SSE: same events as the FastAPI and Litestar adapters.

        Args:
            source: The model's async iterator of text chunks.
            ping: Heartbeat interval in seconds; None or 0 disables it.
            event_type: The ``event:`` name of data events.
            wait_first: Wait for the first item before the headers, so a
                :class:`~llm_guard_sdk.errors.BackendError` before it is answered with its
                HTTP status and a JSON ``{"error"}`` body.
            headers: Extra response headers.
            framing: Our events by default; ``OpenAIChunks(model=...)`` for OpenAI clients.
            retry: The client's reconnection delay (ms), sent once with the first frame.
            event_ids: Number the events (``id:``).

        A client that stopped reading is dropped when the guard's ``send_timeout`` abandons
        the stuck send (:class:`~llm_guard_sdk.errors.PeerGoneError`): this returns quietly.
        """
        events = SSEEvents(source, ping=ping, event_type=event_type, framing=framing,
                           retry=retry, event_ids=event_ids)
        try:
            if wait_first:
                try:
                    await events.prime()
                except BackendError as exc:
                    await self.send_json(exc.status, events.framing.error_document(exc),
                                         headers=exc.headers())
                    return
            extra = {**SSE_HEADERS, **(headers or {})}
            await self.send_headers(status=200, headers=[
                (b"content-type", b"text/event-stream; charset=utf-8"),
                *((k.encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()),
            ])
            async for event in events:
                await self.send_body(encode_sse(event).encode(), more_body=True)
            await self.send_body(b"")
        except PeerGoneError:
            return  # a dead peer: the guard closed the session; nothing can be sent
        finally:
            await events.aclose()

    async def send_json(self, status: int, document: object, *,
                        headers: Mapping[str, str] | None = None) -> None:
        """Send a complete JSON response (errors before a stream starts)."""
        await self.send_response(status, dumps(document).encode(), headers=[
            (b"content-type", b"application/json"),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items())])
