"""Litestar adapter: ``LLMGuardPlugin`` plus SSE and WebSocket chat helpers.

.. code-block:: python

    from llm_guard_sdk.adapters.litestar import LLMGuardPlugin, sse_response, websocket_chat

    @get("/chat")
    async def chat(prompt: str, session: GuardSessionDep) -> ServerSentEvent:   # injected
        return sse_response(model.generate(prompt))

    @websocket("/ws/chat")
    async def ws_chat(socket: WebSocket) -> None:
        await websocket_chat(socket, lambda request: model.generate(request.prompt))

    app = Litestar([chat, ws_chat], plugins=[LLMGuardPlugin()])         # the one line

Litestar applies middleware per route, after routing, and never to the lifespan. So the plugin
registers the guard's endpoints (``/llm-guard/*``) as a route of their own for the middleware
to answer, starts and stops the sampler with the app's startup and shutdown hooks, and leaves
404/405 answers, which happen before any route, entirely to Litestar.

The dependency names say *guard* session (``GuardSessionDep``, ``provide_guard_session``):
Litestar's ``request.session`` is its cookie/server-side session and its SQLAlchemy plugin's
``provide_session`` gives a database session. The first names still work for one release,
with a DeprecationWarning (:mod:`.deprecation`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import anyio

try:
    from litestar import WebSocket, get
    from litestar.config.app import AppConfig
    from litestar.di import Provide
    from litestar.exceptions import WebSocketDisconnect
    from litestar.middleware import DefineMiddleware
    from litestar.plugins import InitPlugin
    from litestar.response import ServerSentEvent
    from litestar.response.base import ASGIResponse
    from litestar.response.sse import ServerSentEventMessage
    from litestar.types import ASGIApp, Receive, Scope, Send
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    from llm_guard_sdk.errors import MissingDependencyError

    raise MissingDependencyError("Litestar", "litestar") from exc

from llm_guard_sdk.asgi.control import serve_control
from llm_guard_sdk.asgi.middleware import GuardMiddleware
from llm_guard_sdk.asgi.responses import send_json
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.errors import BackendError
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.session import Session

from .chat import (
    ChatHandler,
    ChatProtocol,
    ChatRequest,
    chat_settings,
    history_trimmer,
    serving_chat_settings,
)
from .chat import max_message_bytes as message_limit
from .chat_context import ContextBudget
from .chat_loop import serve_chat
from .deprecation import deprecated_names
from .session_lookup import MISSING_SESSION, session_from_scope
from .sse import Event, Framing, SSEEvents

try:  # Litestar >= 2.23 wants injected parameters marked; older ones infer them
    from litestar.di import NamedDependency

    GuardSessionDep: TypeAlias = NamedDependency[Session]
except ImportError:  # pragma: no cover
    GuardSessionDep = Session  # type: ignore[misc]

__all__ = [
    "ChatRequest",
    "ContextBudget",
    "GuardSessionDep",
    "GuardedServerSentEvent",
    "LLMGuardPlugin",
    "provide_guard_session",
    "provide_optional_guard_session",
    "sse_response",
    "websocket_chat",
]

STATE_KEY = "llm_guard"


def provide_guard_session(scope: Scope) -> Session:
    """Dependency: the session of this request or WebSocket.

    Raises:
        RuntimeError: No session: the plugin is missing or the path is exempt (use
            :func:`provide_optional_guard_session` there). A loud 500 rather than a silent None.
    """
    session = session_from_scope(scope)
    if session is None:
        raise RuntimeError(MISSING_SESSION)
    return session


def provide_optional_guard_session(scope: Scope) -> Session | None:
    """Dependency: the session, or None on exempt paths."""
    return session_from_scope(scope)


_RENAMED = {"SessionDep": "GuardSessionDep", "provide_session": "provide_guard_session",
            "provide_optional_session": "provide_optional_guard_session"}
if TYPE_CHECKING:  # the deprecated names, typed as what they alias
    SessionDep = GuardSessionDep
    provide_session = provide_guard_session
    provide_optional_session = provide_optional_guard_session
else:
    __getattr__ = deprecated_names(__name__, _RENAMED, globals())


class LLMGuardPlugin(InitPlugin):
    """Guards a Litestar app: ``Litestar(..., plugins=[LLMGuardPlugin()])``.

    Registers :class:`GuardMiddleware` (outermost of the app's middleware), the ``/llm-guard/*``
    route, a ``session`` dependency (:func:`provide_guard_session`), the guard as
    ``app.state.llm_guard``, and sampler start/stop hooks. Applying it twice changes nothing.

    Args:
        config: Settings; ``GuardConfig.from_env()`` when omitted.
        guard: A guard you built yourself (to add sources or share it); exclusive with config.
        dependency_key: Name of the injected session parameter.
    """

    __slots__ = ("dependency_key", "guard")

    def __init__(self, config: GuardConfig | None = None, *, guard: Guard | None = None,
                 dependency_key: str = "session") -> None:
        if guard is not None and config is not None and guard.config != config:
            raise ValueError("pass either config or guard, not both")
        # Built (and the settings checked) here, when the app module is imported: a
        # ConfigError then stops the server before it starts.
        self.guard = guard if guard is not None else Guard(config)
        chat_settings(self.guard)
        self.dependency_key = dependency_key

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        """Add the middleware, route, dependency, state and lifespan hooks (once)."""
        for entry in app_config.middleware:
            if isinstance(entry, DefineMiddleware) and entry.middleware is GuardMiddleware:
                return app_config  # already guarded
        guard = self.guard
        if self.dependency_key in app_config.dependencies:
            raise ValueError(f"dependency {self.dependency_key!r} is already defined; pass "
                             "LLMGuardPlugin(dependency_key=...) to inject the session "
                             "under another name")
        app_config.middleware.insert(0, DefineMiddleware(GuardMiddleware, guard=guard))
        app_config.dependencies[self.dependency_key] = Provide(provide_guard_session,
                                                               sync_to_thread=False)
        app_config.route_handlers.append(_control_route(guard))
        app_config.state[STATE_KEY] = guard
        app_config.on_startup.append(guard.ensure_started)
        app_config.on_shutdown.append(guard.stop)
        return app_config


def _control_route(guard: Guard) -> Any:
    """``GET /llm-guard/*``: the middleware answers it before this handler would run.

    The handler is a fallback serving the same endpoints when the middleware let the request
    through unguarded (after an internal error).
    """
    prefix = guard.config.route_prefix

    @get(f"{prefix}/{{rest:path}}", name=f"llm-guard-control-{id(guard)}",
         include_in_schema=False)
    async def control() -> ASGIApp:
        async def reply(scope: Scope, receive: Receive, send: Send) -> None:
            await serve_control(scope, send, guard.control_routes, prefix,
                                guard.config.status_token, receive=cast(Any, receive),
                                on_error=guard.record_internal_error)

        return reply

    return control


def _message(event: Event) -> ServerSentEventMessage:
    if event.data is None:
        return ServerSentEventMessage(data=None, comment=event.comment, id=event.id,
                                      retry=event.retry)
    return ServerSentEventMessage(data=event.data, event=event.event, id=event.id,
                                  retry=event.retry)


class GuardedServerSentEvent(ServerSentEvent):
    """Litestar's ``ServerSentEvent`` over :class:`SSEEvents`, optionally waiting for item one."""

    def __init__(self, events: SSEEvents, *, wait_first: bool = False,
                 headers: Mapping[str, str] | None = None) -> None:
        self.events = events
        self.wait_first = wait_first
        self.messages = self._messages()
        super().__init__(self.messages, headers=dict(headers or {}))

    async def _messages(self) -> AsyncGenerator[ServerSentEventMessage, None]:
        async for event in self.events:
            yield _message(event)

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        """Litestar's streaming response, closing the events on every path out."""
        kwargs["media_type"] = None  # the handler's default (JSON) must not override ours
        return cast(ASGIResponse, _Closing(super().to_asgi_response(*args, **kwargs), self))


class _Closing:
    """ASGI wrapper: prime the first item if asked, and always close the events afterwards."""

    def __init__(self, inner: ASGIResponse, owner: GuardedServerSentEvent) -> None:
        self.inner = inner
        self.owner = owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        events = self.owner.events
        try:
            if self.owner.wait_first:
                try:
                    await events.prime()
                except BackendError as exc:
                    await send_json(send, exc.status, events.framing.error_document(exc), headers=[
                        (k.encode("latin-1"), v.encode("latin-1"))
                        for k, v in exc.headers().items()])
                    return
            await self.inner(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.owner.messages.aclose()
            await events.aclose()


def sse_response(source: AsyncIterable[Any], *, ping: float | None = 15.0,
                 event_type: str | None = None, wait_first: bool = False,
                 headers: Mapping[str, str] | None = None, framing: Framing | None = None,
                 retry: int | None = None, event_ids: bool = False) -> GuardedServerSentEvent:
    """Stream ``source`` as Server-Sent Events through Litestar's ``ServerSentEvent``, guarded.

    Same events as the FastAPI adapter: ``data`` per item, ``: ping`` every ``ping`` seconds
    of silence, ``event: evicted`` when the guard closed the stream, ``event: error`` when the
    backend failed mid-stream, then ``event: done``. With ``wait_first`` a
    :class:`~llm_guard_sdk.errors.BackendError` before the first item becomes its HTTP status
    with a JSON ``{"error"}`` body. ``framing``, ``retry`` and ``event_ids`` as in the FastAPI
    adapter (``framing=OpenAIChunks(model=...)`` speaks OpenAI's chunk format).
    """
    events = SSEEvents(source, ping=ping, event_type=event_type, framing=framing, retry=retry,
                       event_ids=event_ids)
    return GuardedServerSentEvent(events, wait_first=wait_first, headers=headers)


async def websocket_chat(socket: WebSocket[Any, Any, Any], handler: ChatHandler, *,
                         max_message_bytes: int | None = None,
                         context: ContextBudget | None = None) -> None:
    """Run a chat loop in a ``@websocket`` handler: receive a prompt, stream, repeat.

    Same protocol and bad-input rules as the FastAPI adapter (1009 for frames over
    ``max_message_bytes``, 1003 for binary frames, an error frame for invalid JSON); returns
    when the client disconnects or the guard evicted the connection (closed with 1013). The
    history is trimmed before each generation to ``context`` (a :class:`ContextBudget`; None:
    the chat settings' ``max_history_tokens``), and a frame's ``"history"`` that is not a list
    of messages closes the socket with 1003 (docs/context.md).
    """
    if socket.connection_state == "init":
        await socket.accept()
    chat = ChatProtocol(handler, socket.send_text, session=session_from_scope(socket.scope),
                        max_bytes=message_limit(max_message_bytes),
                        trimmer=history_trimmer(context),
                        heartbeat=serving_chat_settings().heartbeat())
    try:
        await serve_chat(chat, socket.receive, socket.close)
    except (WebSocketDisconnect, OSError):  # ASGI 2.4: send on a closed socket is an OSError
        return
