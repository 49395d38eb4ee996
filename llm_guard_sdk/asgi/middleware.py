"""``GuardMiddleware``: the one line an app adds. It only wires the pieces together.

Pure ASGI (no ``BaseHTTPMiddleware``, which breaks disconnect handling, vllm#10087). Lifespan and
unknown scopes pass through untouched; HTTP and WebSocket connections each get a session, are
admitted or shed, and are watched for disconnects. Any internal error is counted and the
request proceeds unguarded: the guard must never take the app down. The guard's own routes
(``route_prefix``) are the exception: they are always answered by the guard, never the app.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from llm_guard_sdk.actions.admission import QUOTA_REASONS
from llm_guard_sdk.asgi.connection import Connection
from llm_guard_sdk.asgi.control import serve_control
from llm_guard_sdk.asgi.heartbeat import ServerHeartbeatCheck
from llm_guard_sdk.asgi.http import HttpConnection
from llm_guard_sdk.asgi.refusal import ConfigRefusal
from llm_guard_sdk.asgi.responses import (
    over_quota_http,
    over_quota_websocket,
    shed_http,
    shed_websocket,
)
from llm_guard_sdk.asgi.websocket import WebSocketConnection
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.context import SCOPE_KEY, bind, restore
from llm_guard_sdk.errors import ConfigError, PeerGoneError
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.session import CloseReason
from llm_guard_sdk.tenants import TenantKeyFunction
from llm_guard_sdk.types import Message, Receive, Scope, Send

logger = logging.getLogger("llm_guard_sdk")

_MAX_LABEL = 128


def request_label(scope: Scope) -> str | None:
    """A client correlation id (``x-request-id``) if it is short and printable, else None.

    Hostile values (oversized, control characters, non-ASCII) are ignored rather than echoed
    into logs or status.
    """
    for name, value in scope.get("headers") or ():
        if name == b"x-request-id":
            if 0 < len(value) <= _MAX_LABEL and all(0x21 <= b <= 0x7E for b in value):
                return bytes(value).decode("ascii")
            return None
    return None


def path_matches(path: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``path`` falls under one of ``patterns``.

    ``/metrics`` matches ``/metrics`` and ``/metrics/...`` but not ``/metricsx``; a trailing
    ``*`` matches any path starting with the rest (``/health*``: ``/health``, ``/healthz``,
    ``/health/live``, ``/healthcheck``).
    """
    for pattern in patterns:
        if pattern.endswith("*"):
            if path.startswith(pattern[:-1]):
                return True
        elif path == pattern or path.startswith(pattern + "/"):
            return True
    return False


class GuardMiddleware:
    """Guards an ASGI app: per-session accounting, eviction and shedding under memory pressure.

    Args:
        app: The ASGI app to protect (first, as Starlette's ``add_middleware`` and Litestar's
            ``DefineMiddleware`` expect).
        config: Settings; defaults to :meth:`GuardConfig.from_env`.
        guard: Share one :class:`Guard` between middlewares or reach it from your code
            (``guard.add_source``, ``guard.status()``). Built from ``config`` when omitted.
        tenant_key: ``fn(scope) -> tenant or None`` for the guard built here (see
            :class:`~llm_guard_sdk.tenants.TenantResolver`); with ``guard=``, give it to the
            :class:`Guard` instead.

    Invalid settings (a :class:`ConfigError` building the guard) do not raise here: Starlette
    builds middleware on the first ASGI call, where uvicorn would swallow the error and serve
    500s. The middleware keeps the error and fails the lifespan startup with its message
    instead, so the server refuses to start (:mod:`llm_guard_sdk.asgi.refusal`).
    """

    def __init__(
        self, app: Any, *, config: GuardConfig | None = None, guard: Guard | None = None,
        tenant_key: TenantKeyFunction | None = None,
    ) -> None:
        self.app = app
        self.refusal: ConfigRefusal | None = None
        self._guard = guard
        if guard is not None and tenant_key is not None:
            raise TypeError("give tenant_key to the Guard when passing guard=")
        if guard is None:
            try:
                self._guard = Guard(config, tenant_key=tenant_key)
            except ConfigError as exc:
                self.refusal = ConfigRefusal(exc)
        self.prefix = self._guard.config.route_prefix if self._guard is not None else ""
        self.server_heartbeat = ServerHeartbeatCheck()

    @property
    def guard(self) -> Guard:
        """The guard serving the app; raises the ConfigError when the settings were invalid."""
        if self._guard is None:
            assert self.refusal is not None
            raise self.refusal.error
        return self._guard

    # Untyped on purpose (like ``app``): frameworks declare ASGI callables with TypedDict
    # messages (Litestar), which are not MutableMappings, and each must accept this middleware.
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Route one ASGI connection: pass through, serve control, shed, or guard."""
        conn = self._route(scope, receive, send)
        if not isinstance(conn, Connection):
            await conn
            return
        # The guarded run is here, not in a helper coroutine: this frame lives as long as the
        # connection anyway, and a second one would cost ~300 B per idle WebSocket. Routing is
        # in a plain method for the same reason: each local of this frame is kept as long.
        bound_before = bind(conn)  # the connection is the binding: its session and guard
        reason = CloseReason.COMPLETED
        try:
            await self.app(scope, conn.receive, conn.app_send)
        except PeerGoneError:
            # The guard's own abandoned send (a dead peer) that the app, or a middleware in
            # between such as Starlette's BaseHTTPMiddleware, let through: the connection is
            # gone either way, so it ends here, not as "Exception in ASGI application".
            reason = CloseReason.SEND_TIMEOUT
        except asyncio.CancelledError:
            # The same for an HTTP body chunk, whose stuck send the guard cancels without a
            # frame of ours to turn it into PeerGoneError; anyone else's cancel propagates.
            if not conn.absorbs_cancel():
                reason = CloseReason.ERROR
                raise
            reason = CloseReason.SEND_TIMEOUT
        except BaseException:
            reason = CloseReason.ERROR
            raise
        finally:
            restore(bound_before)
            try:
                await conn.guard.close_session(conn.session, reason)
            except Exception:
                conn.guard.record_internal_error("session close")
            finally:
                # Always, even when closing failed or was cancelled: the pump and any pending
                # terminator end here, and nothing is sent after the app returned.
                await conn.finish()

    def _route(self, scope: Any, receive: Any, send: Any) -> Connection | Awaitable[None]:
        """The guarded connection to run, or the awaitable that answers this one instead."""
        if self.refusal is not None:
            return self.refusal(scope, receive, send)
        kind = scope["type"]
        if kind == "lifespan":
            return self.app(scope, self._lifespan_receive(receive), send)  # type: ignore[no-any-return]
        if kind not in ("http", "websocket"):
            return self.app(scope, receive, send)  # type: ignore[no-any-return]
        guard = self.guard
        if kind == "websocket" and not self.server_heartbeat.done:
            self.server_heartbeat.check(receive, guard.config.idle_timeout)
        path = scope.get("path", "")
        if kind == "http" and path_matches(path, (self.prefix,)):
            # Answered here whatever happens: a control request never reaches the app.
            try:
                guard.ensure_started()  # probes alone must keep the level current
            except Exception:
                guard.record_internal_error("sampler start")
            return serve_control(scope, send, guard.control_routes, self.prefix,
                                 guard.config.status_token, receive=receive,
                                 on_error=guard.record_internal_error)
        try:
            guard.ensure_started()
            exempt = path_matches(path, guard.config.exempt_paths)
            tenant, priority = guard.tenants.resolve(scope)  # never raises into the app
            refusal = None if exempt else guard.admit(tenant, priority)
        except Exception:
            guard.record_internal_error("admission")
            return self.app(scope, receive, send)  # type: ignore[no-any-return]
        if exempt:
            return self.app(scope, receive, send)  # type: ignore[no-any-return]
        if refusal is not None:
            guard.record_shed(refusal, scope.get("path", "")[:_MAX_LABEL], tenant,
                              protocol=kind)
            return self._shed(scope, receive, send, refusal)
        conn = self._open(scope, receive, send, tenant, priority)
        return self.app(scope, receive, send) if conn is None else conn

    def _open(self, scope: Scope, receive: Receive, send: Send, tenant: str,
              priority: Priority) -> Connection | None:
        """Open the session and wrap the connection; None on failure."""
        guard = self.guard
        conn: Connection | None = None
        try:
            session = guard.registry.open(scope["type"], scope.get("path", ""),
                                          label=request_label(scope), tenant=tenant,
                                          priority=priority)
            scope[SCOPE_KEY] = session  # in place, as frameworks set "app"/"state"
            if scope["type"] == "http":
                return HttpConnection(guard, session, receive, send)
            conn = WebSocketConnection(guard, session, receive, send)
        except Exception:
            guard.record_internal_error("session setup")
            if conn is not None:  # never finished: the dead-peer watch must let it go here
                guard.dead_peers.forget(conn)
            return None
        return conn

    async def _shed(self, scope: Scope, receive: Receive, send: Send, reason: str) -> None:
        """503 for the server's pressure, 429 for the tenant's quota (WebSocket: deny/close)."""
        retry_after = self.guard.config.retry_after
        quota = reason in QUOTA_REASONS
        if scope["type"] == "http":
            await (over_quota_http if quota else shed_http)(send, reason, retry_after)
            return
        message = await receive()
        if message["type"] == "websocket.connect":
            refuse = over_quota_websocket if quota else shed_websocket
            await refuse(scope, send, reason, retry_after)

    def _lifespan_receive(self, receive: Receive) -> Receive:
        """Observe startup/shutdown to run the sampler with the app; messages are unchanged."""
        guard = self.guard

        async def wrapped() -> Message:
            message = await receive()
            try:
                if message["type"] == "lifespan.startup":
                    guard.ensure_started()
                    self.server_heartbeat.check(receive, guard.config.idle_timeout)
                elif message["type"] == "lifespan.shutdown":
                    await guard.stop()
            except Exception:
                guard.record_internal_error("lifespan")
            return message

        return wrapped
