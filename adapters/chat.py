"""The WebSocket chat protocol every adapter speaks, apart from any framework.

Each adapter only feeds inbound frames to :class:`ChatProtocol` and closes the socket when it
returns a :class:`Reject`, so FastAPI, Litestar and Channels chats behave the same way on
completion, disconnect, eviction and bad input.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, NamedTuple

from llm_guard_sdk.errors import BackendError, InvalidHistoryError
from llm_guard_sdk.guard import Guard, current_guard
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.settings import POSITIVE, SIZE_FORM, Rule, Settings, limit, number, size
from llm_guard_sdk.stream import guard_stream
from llm_guard_sdk.trimming import ContextStats

from .chat_context import ContextBudget, HistoryTrimmer, close_reason
from .heartbeat import ChatHeartbeat, heartbeat_warning
from .wire import dumps, eviction_reason, model_failure

logger = logging.getLogger("llm_guard_sdk")

WS_UNSUPPORTED_DATA: Final = 1003
WS_MESSAGE_TOO_BIG: Final = 1009
WS_INTERNAL_ERROR: Final = 1011  # what websockets' own keepalive sends on a ping timeout


@dataclass(frozen=True, slots=True)
class ChatSettings(Settings):
    """Settings of the WebSocket chat helpers, and the guard extension ``"chat"`` holding them.

    ``ChatSettings(max_message_bytes="64Ki")`` reads the fields not given from the environment
    (``LLM_GUARD_MAX_MESSAGE_BYTES``); ``ChatSettings.defaults()`` ignores it. The adapters'
    ``install``/``LLMGuardPlugin``/``guard_application`` add ``ChatSettings()`` to the guard at
    start-up (a bad value stops start-up); ``guard.add_extension(ChatSettings(...))`` first
    sets them in code for every chat the guard serves.

    Attributes:
        max_message_bytes: Largest inbound chat frame; a larger one closes the socket (1009).
        max_history_tokens: Token budget of a session's history, enforced before each
            generation (docs/context.md); 0 turns trimming off. The default, counted with the
            byte estimate (an upper bound), is about 32 KiB of text.
        ping_interval: Seconds of silence before the server sends ``{"type": "ping"}``
            (``LLM_GUARD_CHAT_PING_INTERVAL``); None/0: no application-level heartbeat.
        ping_timeout: Seconds a client has to answer a ping (``LLM_GUARD_CHAT_PING_TIMEOUT``)
            before it is closed as dead (see :mod:`.heartbeat`).
    """

    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({
        "max_message_bytes": Rule(size, f"expected {SIZE_FORM}, e.g. 1Mi", text=True),
        "max_history_tokens": Rule(number(lambda x: x >= 0, integer=True),
                                   "expected an integer >= 0 (0: no trimming), e.g. 32768"),
        "ping_interval": Rule(limit, "expected seconds > 0, or 0/empty for no ping, e.g. 30"),
        "ping_timeout": Rule(POSITIVE, "expected seconds > 0, e.g. 20"),
    })
    ENV_NAME_EXCEPTIONS: ClassVar[Mapping[str, str]] = MappingProxyType({
        "ping_interval": "LLM_GUARD_CHAT_PING_INTERVAL",
        "ping_timeout": "LLM_GUARD_CHAT_PING_TIMEOUT"})
    WARN_UNKNOWN: ClassVar[bool] = False  # GuardConfig warns about LLM_GUARD_* for everyone
    name: ClassVar[str] = "chat"

    max_message_bytes: int = 1048576
    max_history_tokens: int = 32768
    ping_interval: float | None = None
    ping_timeout: float = 20.0

    def setup(self, guard: Guard) -> None:
        """Extension entry point: kept as ``"chat"``; adds the ``"context"`` status section.

        Warns (once, here at start-up) when the heartbeat is not safely below the guard's
        ``idle_timeout``.
        """
        guard.add_extension(ContextStats())
        warning = heartbeat_warning(self.ping_interval, self.ping_timeout,
                                    guard.config.idle_timeout, source="the chat ping")
        if warning is not None:
            logger.warning("llm-guard: %s", warning)

    def heartbeat(self) -> ChatHeartbeat:
        """A fresh heartbeat for one connection."""
        return ChatHeartbeat(self.ping_interval, self.ping_timeout)


def chat_settings(guard: Guard) -> ChatSettings:
    """The chat settings ``guard`` keeps; read (and checked) from the environment the first time."""
    kept = guard.extension(ChatSettings.name)
    if isinstance(kept, ChatSettings):
        return kept
    settings = ChatSettings()
    guard.add_extension(settings)
    return settings


def serving_chat_settings() -> ChatSettings:
    """The serving guard's chat settings; outside a guard, from the environment."""
    guard = current_guard()
    return chat_settings(guard) if guard is not None else ChatSettings()


def max_message_bytes(override: int | None = None) -> int:
    """The inbound WebSocket message limit: ``override``, else the serving guard's chat settings.

    Outside a guard, :class:`ChatSettings` from the environment.
    """
    if override is not None:
        return override
    return serving_chat_settings().max_message_bytes


def history_trimmer(budget: ContextBudget | None = None) -> HistoryTrimmer:
    """A session's trimmer: ``budget``, its ``max_tokens`` defaulting to the chat settings.

    Under a guard the totals go to its ``"context"`` status section; outside one, to a
    private :class:`ContextStats`.
    """
    budget = budget if budget is not None else ContextBudget()
    guard = current_guard()
    settings = chat_settings(guard) if guard is not None else ChatSettings()
    stats = guard.extension(ContextStats.name) if guard is not None else None
    if not isinstance(stats, ContextStats):
        stats = ContextStats()
    limit = budget.max_tokens if budget.max_tokens is not None else settings.max_history_tokens
    return HistoryTrimmer(limit, budget, stats)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One prompt of a WebSocket chat, handed to the app's handler.

    Attributes:
        prompt: The ``prompt`` field of the client's JSON message.
        message: The whole JSON object (``max_tokens`` and any other fields).
        history: Earlier turns plus this prompt, as ``{"role", "content"}`` dicts, trimmed to
            the session's token budget; owned by the session, so it is freed when the
            connection closes or is evicted.
        session: The connection's session, or None outside the middleware.
    """

    prompt: str
    message: dict[str, Any]
    history: list[dict[str, str]] = field(default_factory=list)
    session: Session | None = None


ChatHandler = Callable[[ChatRequest], AsyncIterable[str] | Awaitable[AsyncIterable[str]]]
"""Returns the token stream for one prompt; raises ValueError for a bad request."""


class Reject(NamedTuple):
    """Close the socket with this code and reason."""

    code: int
    reason: str


def _too_big(text: str, limit: int) -> bool:
    # A character is 1-4 UTF-8 bytes: only encode when the length alone cannot decide.
    return len(text) > limit or (4 * len(text) > limit and len(text.encode()) > limit)


class ChatProtocol:
    """The chat loop's per-connection state and its answer to each inbound frame.

    Protocol: the client sends ``{"prompt": "...", ...}`` as a text frame and receives
    ``{"type": "token", "text"}`` frames, then ``{"type": "done", "turns": n}``. With a
    heartbeat (:mod:`.heartbeat`) the server sends ``{"type": "ping"}`` to a silent client,
    which answers ``{"type": "pong"}``; a client's own ``{"type": "ping"}`` gets a pong. Bad input:
    a frame over ``max_bytes`` closes the socket with 1009, a binary frame with 1003 (both
    protocol violations a well-behaved client never commits); invalid JSON or a missing
    prompt gets ``{"type": "error"}`` and the connection stays usable, since that is an
    application-level mistake the client can correct.

    History: a frame may carry ``"history"`` (a list of ``{"role", "content"}`` messages) to
    replace the conversation so far (a system prompt, a resumed chat); one that is not a list
    of messages closes the socket with 1003 and the reason. Before each generation the
    history is trimmed to ``trimmer``'s budget; a prompt that alone exceeds it is answered
    with an error frame (status 400) and not kept.
    """

    def __init__(self, handler: ChatHandler, send_text: Callable[[str], Awaitable[None]], *,
                 session: Session | None, max_bytes: int,
                 trimmer: HistoryTrimmer | None = None,
                 heartbeat: ChatHeartbeat | None = None) -> None:
        self.handler = handler
        self.trimmer = trimmer if trimmer is not None else history_trimmer()
        self.send_text = send_text
        self.session = session
        self.max_bytes = max_bytes
        self.heartbeat = heartbeat if heartbeat is not None else ChatHeartbeat(None, 1.0)
        self.history: list[dict[str, str]] = session.attach([]) if session is not None else []
        self.turns = 0

    @property
    def gone(self) -> bool:
        """The session closed (client left, evicted): nothing more can reach the client."""
        return self.session is not None and self.session.closed

    async def send(self, payload: dict[str, Any]) -> None:
        """Send one JSON frame, unless the connection is already gone."""
        if not self.gone:
            await self.send_text(dumps(payload))

    def next_wait(self) -> float | None:
        """Seconds to wait for a frame before :meth:`on_silence`; None: no heartbeat now."""
        return self.heartbeat.wait()

    async def on_silence(self) -> Reject | None:
        """No frame came in time: ping, or close a client that did not answer the last ping.

        Through the guard when there is one (closed as ``ping_timeout``, counted, the close
        frame sent by the connection); else the returned :class:`Reject` closes the socket.
        """
        due = self.heartbeat.due()
        if due == "ping":
            self.heartbeat.pinged()
            await self.send({"type": "ping"})
        elif due == "dead":
            guard, session = current_guard(), self.session
            if guard is None or session is None:
                return Reject(WS_INTERNAL_ERROR, "ping timeout")
            await guard.close_session(session, CloseReason.PING_TIMEOUT)
        return None

    async def on_frame(self, text: str | None, data: bytes | None) -> Reject | None:
        """Handle one inbound frame; a returned :class:`Reject` means close the socket."""
        self.heartbeat.seen()
        size = len(data) if text is None and data is not None else None
        if (size is not None and size > self.max_bytes) or (
                text is not None and _too_big(text, self.max_bytes)):
            return Reject(WS_MESSAGE_TOO_BIG, "message too big")
        if text is None:
            return Reject(WS_UNSUPPORTED_DATA, "binary frames are not supported; send JSON text")
        try:
            message = json.loads(text)
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "pong":
                return None
            if kind == "ping":
                await self.send({"type": "pong"})
                return None
            if not isinstance(message, dict) or not isinstance(message.get("prompt"), str):
                raise ValueError('expected a JSON object with a string "prompt"')
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            await self.send({"type": "error", "error": f"bad request: {exc}"})
            return None
        if "history" in message:
            try:
                self.trimmer.replace(self.history, message["history"])
            except InvalidHistoryError as exc:
                return Reject(WS_UNSUPPORTED_DATA, close_reason(exc.message))
        self.heartbeat.busy = True
        try:
            await self.turn(message["prompt"], message)
        finally:
            self.heartbeat.busy = False
            self.heartbeat.seen()
        return None

    async def turn(self, prompt: str, message: dict[str, Any]) -> None:
        """Stream one answer; history keeps the turn unless the request or backend failed."""
        history = self.history
        asked = {"role": "user", "content": prompt}
        history.append(asked)
        try:
            await self.trimmer.trim(history)  # BackendError: over budget (400), failed (500)
            try:
                source = self.handler(ChatRequest(prompt, message, history, self.session))
                if inspect.isawaitable(source):
                    source = await source
            except ValueError as exc:
                _forget(history, asked)
                await self.send({"type": "error", "error": f"bad request: {exc}"})
                return
            reply: list[str] = []
            async with guard_stream(source, session=self.session) as stream:
                while True:
                    try:
                        token = await anext(stream)
                    except StopAsyncIteration:
                        break
                    except BackendError:
                        raise
                    except Exception as exc:  # the app's model failed mid-turn (not a send)
                        raise model_failure(exc) from exc
                    reply.append(token)
                    await self.send({"type": "token", "text": token})
        except BackendError as exc:
            _forget(history, asked)
            await self.send({"type": "error", "error": exc.message, "status": exc.status})
            return
        if self.gone:
            return  # disconnected or evicted: the middleware has ended the connection
        reason = eviction_reason(stream)
        if reason is not None:  # e.g. a chunk timeout
            await self.send({"type": "evicted", "reason": reason.value})
        history.append({"role": "assistant", "content": "".join(reply)})
        self.turns += 1
        await self.send({"type": "done", "turns": self.turns})


def _forget(history: list[dict[str, str]], entry: dict[str, str]) -> None:
    """Drop ``entry`` (by identity) from ``history``."""
    history[:] = [m for m in history if m is not entry]
