"""FastAPI adapter: ``install(app)`` plus a session dependency, SSE and WebSocket chat helpers.

.. code-block:: python

    from llm_guard_sdk.adapters.fastapi import (
        GuardSessionDep, install, sse_response, websocket_chat,
    )

    app = FastAPI()
    install(app)                                       # the one line

    @app.get("/chat")
    async def chat(prompt: str, session: GuardSessionDep) -> StreamingResponse:
        return sse_response(model.generate(prompt))

    @app.websocket("/ws/chat")
    async def ws_chat(websocket: WebSocket) -> None:
        await websocket_chat(websocket, lambda request: model.generate(request.prompt))

The guard's own endpoints (``/llm-guard/status``) are answered by the middleware itself, so
``install`` adds no routes. Nothing here catches the framework's exceptions or rewrites its
status codes: a 404 or an ``HTTPException(418)`` reaches the client unchanged.

The dependencies are named ``GuardSessionDep`` and ``get_guard_session`` because FastAPI's own
SQL tutorial calls its database session ``SessionDep``/``get_session``; those first names still
work for one release, with a DeprecationWarning (:mod:`.deprecation`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import anyio

try:
    from fastapi import Depends, FastAPI, WebSocket
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.requests import HTTPConnection
    from starlette.types import Receive, Scope, Send
    from starlette.websockets import WebSocketDisconnect, WebSocketState
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    from llm_guard_sdk.errors import MissingDependencyError

    raise MissingDependencyError("FastAPI", "fastapi") from exc

from llm_guard_sdk.asgi.middleware import GuardMiddleware
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
from .sse import SSE_HEADERS, Framing, SSEEvents, encode_sse

__all__ = [
    "ChatRequest",
    "ContextBudget",
    "GuardSessionDep",
    "GuardedSSEResponse",
    "OptionalGuardSessionDep",
    "get_guard_session",
    "get_optional_guard_session",
    "install",
    "sse_response",
    "websocket_chat",
]

STATE_KEY = "llm_guard"


def install(app: FastAPI, config: GuardConfig | None = None, *,
            guard: Guard | None = None) -> Guard:
    """Guard ``app``: add :class:`GuardMiddleware` and expose the guard as ``app.state.llm_guard``.

    Idempotent, because apps are often assembled by several modules: a second call returns the
    guard already installed and changes nothing. It refuses a *different* explicit guard or
    config rather than silently ignoring it.

    Args:
        app: The FastAPI (or Starlette) app, before it starts serving.
        config: Settings; ``GuardConfig.from_env()`` when omitted.
        guard: A guard you built yourself (to add sources or share it); exclusive with config.

    Returns:
        The guard serving ``app``.

    Raises:
        ConfigError: Invalid settings (environment or ``config``), here, at import time, so
            the server never starts with them; the chat settings are checked too.
        ValueError: ``config`` and ``guard`` disagree, or differ from what is installed.
        RuntimeError: The app already started (Starlette cannot add middleware then).
    """
    if guard is not None and config is not None and guard.config != config:
        raise ValueError("pass either config or guard, not both")
    for entry in app.user_middleware:
        cls: object = entry.cls
        if cls is GuardMiddleware:
            existing = _installed_guard(app, entry.kwargs)
            if (guard is not None and guard is not existing) or (
                    config is not None and config != existing.config):
                raise ValueError("llm-guard is already installed on this app with another "
                                 "guard or config")
            setattr(app.state, STATE_KEY, existing)
            return existing
    chosen = guard if guard is not None else Guard(config)
    chat_settings(chosen)  # read and checked now, not at the first chat
    app.add_middleware(GuardMiddleware, guard=chosen)
    setattr(app.state, STATE_KEY, chosen)
    return chosen


def _installed_guard(app: FastAPI, kwargs: dict[str, Any]) -> Guard:
    """The guard of a GuardMiddleware entry, also one added by hand without ``guard=``."""
    guard: Guard | None = kwargs.get("guard")
    if guard is not None:
        return guard
    node: Any = app.middleware_stack
    while node is not None:  # already built: the middleware made its own guard
        if isinstance(node, GuardMiddleware):
            return node.guard
        node = getattr(node, "app", None)
    guard = Guard(kwargs.pop("config", None))  # not built yet: give it a guard we can expose
    kwargs["guard"] = guard
    return guard


async def get_guard_session(connection: HTTPConnection) -> Session:
    """Dependency: the session of this request or WebSocket.

    Raises:
        RuntimeError: No session: the middleware is missing (a deployment bug, so it fails
            loudly as a 500 with this message in the log) or the path is exempt, where
            :func:`get_optional_guard_session` is the right dependency.
    """
    session = session_from_scope(connection.scope)
    if session is None:
        raise RuntimeError(MISSING_SESSION)
    return session


async def get_optional_guard_session(connection: HTTPConnection) -> Session | None:
    """Dependency: the session, or None on exempt paths and without the middleware."""
    return session_from_scope(connection.scope)


GuardSessionDep = Annotated[Session, Depends(get_guard_session)]
OptionalGuardSessionDep = Annotated[Session | None, Depends(get_optional_guard_session)]

_RENAMED = {"SessionDep": "GuardSessionDep", "OptionalSessionDep": "OptionalGuardSessionDep",
            "get_session": "get_guard_session",
            "get_optional_session": "get_optional_guard_session"}
if TYPE_CHECKING:  # the deprecated names, typed as what they alias
    SessionDep = GuardSessionDep
    OptionalSessionDep = OptionalGuardSessionDep
    get_session = get_guard_session
    get_optional_session = get_optional_guard_session
else:
    __getattr__ = deprecated_names(__name__, _RENAMED, globals())


class GuardedSSEResponse(StreamingResponse):
    """A ``text/event-stream`` response over :class:`SSEEvents`; always closes the stream.

    Starlette neither closes a body iterator nor, under ASGI spec 2.4, notices a disconnect
    before the next send; this response closes its events (and so the model stream) on every
    path out of ``__call__``.
    """

    def __init__(self, events: SSEEvents, *, wait_first: bool = False,
                 headers: Mapping[str, str] | None = None) -> None:
        self.events = events
        self.wait_first = wait_first
        self._body = self._frames()
        super().__init__(self._body, media_type="text/event-stream",
                         headers={**SSE_HEADERS, **(headers or {})})

    async def _frames(self) -> AsyncGenerator[str, None]:
        async for event in self.events:
            yield encode_sse(event)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the stream; with ``wait_first``, a backend error before it is a plain error."""
        try:
            if self.wait_first:
                try:
                    await self.events.prime()
                except BackendError as exc:
                    error = JSONResponse(self.events.framing.error_document(exc),
                                         status_code=exc.status,
                                         headers=exc.headers())
                    await error(scope, receive, send)
                    return
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):
                await self._body.aclose()
            await self.events.aclose()


def sse_response(source: AsyncIterable[Any], *, ping: float | None = 15.0,
                 event_type: str | None = None, wait_first: bool = False,
                 headers: Mapping[str, str] | None = None, framing: Framing | None = None,
                 retry: int | None = None, event_ids: bool = False) -> GuardedSSEResponse:
    """Stream ``source`` as Server-Sent Events, guarded.

    ``source`` is wrapped with :func:`~llm_guard_sdk.guard_stream` (bound to the current
    session); every item becomes a ``data:`` event (str as is, bytes decoded, anything else as
    JSON); ``: ping`` comments are sent every ``ping`` seconds while waiting for an item; the
    stream ends with ``event: done``, preceded by ``event: evicted`` with ``{"reason"}`` when
    the guard closed it, or is ended by ``event: error`` with ``{"error", "status"}`` when the
    backend raised :class:`~llm_guard_sdk.errors.BackendError` mid-stream.

    Args:
        source: The model's async iterator of text chunks.
        ping: Heartbeat interval in seconds; None or 0 disables it.
        event_type: The ``event:`` name of data events (default: unnamed "message" events).
        wait_first: Wait for the first item before sending headers, so a request the backend
            rejects (``BackendError``) gets its real HTTP status and a JSON ``{"error"}`` body
            instead of a 200 with an error event. Heartbeats start after the first item.
        headers: Extra response headers.
        framing: How items are framed and the stream ends: our events by default,
            ``OpenAIChunks(model=...)`` for OpenAI clients (:mod:`.openai_chunks`).
        retry: The client's reconnection delay (ms), sent once with the first frame.
        event_ids: Number the events (``id:``), so a reconnecting client sends
            ``Last-Event-ID``.
    """
    events = SSEEvents(source, ping=ping, event_type=event_type, framing=framing, retry=retry,
                       event_ids=event_ids)
    return GuardedSSEResponse(events, wait_first=wait_first, headers=headers)


async def websocket_chat(websocket: WebSocket, handler: ChatHandler, *,
                         max_message_bytes: int | None = None,
                         context: ContextBudget | None = None) -> None:
    """Run a chat loop on ``websocket``: receive a prompt, stream the answer, repeat.

    ``handler(request)`` returns the token stream for a :class:`ChatRequest` (its ``history``
    is attached to the session, so it lives exactly as long as the connection). Frames:
    ``{"type": "token", "text"}`` per token, then ``{"type": "done", "turns"}``;
    ``{"type": "evicted", "reason"}`` before ``done`` when the guard stopped the stream but
    kept the connection (a chunk or stream timeout);
    ``{"type": "error", ...}`` for invalid JSON, a missing prompt, a ``ValueError`` from the
    handler or a backend error, after which the loop continues. A frame larger than
    ``max_message_bytes`` closes the socket with 1009, a binary frame with 1003. On client
    disconnect the loop returns (the stream was already stopped by the middleware); on
    eviction the middleware has closed the socket with 1013 and the loop returns.
    Before each generation the history is trimmed to the session's token budget
    (``LLM_GUARD_MAX_HISTORY_TOKENS``, docs/context.md); a frame's ``"history"`` that is not a
    list of messages closes the socket with 1003.

    Args:
        websocket: The endpoint's socket; accepted here if the endpoint did not.
        handler: Builds the token stream for one prompt (sync or async).
        max_message_bytes: Overrides the guard's chat settings (:class:`ChatSettings`).
        context: The history budget, strategy and tokenizer (:class:`ContextBudget`); None
            takes the chat settings' budget, the sliding window and the byte estimate.
    """
    if websocket.client_state is WebSocketState.CONNECTING:
        await websocket.accept()
    chat = ChatProtocol(handler, websocket.send_text, session=session_from_scope(websocket.scope),
                        max_bytes=message_limit(max_message_bytes),
                        trimmer=history_trimmer(context),
                        heartbeat=serving_chat_settings().heartbeat())
    try:
        await serve_chat(chat, websocket.receive, websocket.close)
    except (WebSocketDisconnect, OSError):  # ASGI 2.4: send on a closed socket is an OSError
        return
