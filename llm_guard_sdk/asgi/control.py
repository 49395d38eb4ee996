"""The guard's own endpoints under ``/llm-guard/``: auth, dispatch, and a reply that cannot fail.

They expose internals (sizes, counts, session ids), so by default they need a bearer token or,
when no token is configured, a loopback client whose request carries no forwarding header (a
same-host reverse proxy makes every client look like loopback, and uvicorn's ``proxy_headers``
rewrites the client address from ``X-Forwarded-For``, so only the raw headers tell). A route may
instead require the token always (``access="token"``) or be public (``access="public"``). The
token is compared in constant time.

A browser cannot send a bearer header when it navigates or opens an ``EventSource``, so
``"status"`` routes also accept the auth cookie: ``GET <route>?token=T`` on a route registered
with ``login=True`` (the dashboard page) checks T, sets an ``HttpOnly``, ``SameSite=Strict``
cookie scoped to the route prefix and redirects (303) to the route without the token in the
URL. The cookie holds an HMAC of the token, never the token: it cannot be replayed as a bearer
token, nor on ``"token"`` routes.

Whatever a handler or the server's ``send`` does, a control request is answered here and only
here: it never falls through to the app, and never starts a second response.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import inspect
import ipaddress
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs

import anyio

from llm_guard_sdk.asgi.responses import send_bytes, send_json
from llm_guard_sdk.hooks import ControlAccess, ControlBody, ControlRoute, ControlStream
from llm_guard_sdk.types import Message, Receive, Send

logger = logging.getLogger("llm_guard_sdk")

FORWARDING_HEADERS = frozenset({b"forwarded", b"x-forwarded-for", b"x-real-ip"})
"""Headers a reverse proxy adds; their presence means the TCP peer is not the client."""

_NEEDS_TOKEN = "set LLM_GUARD_STATUS_TOKEN and send it as a bearer token"

AUTH_COOKIE = "llm_guard_auth"
"""The cookie a browser login sets; accepted on ``"status"`` routes only."""
LOGIN_PARAMETER = "token"
"""The query parameter of a browser login (``GET /llm-guard/dashboard?token=...``)."""
_COOKIE_CONTEXT = b"llm-guard auth cookie v1"


def is_loopback(scope: dict[str, Any] | Any) -> bool:
    """True when the ASGI client address is a loopback address (127.0.0.0/8 or ::1)."""
    client = scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(str(client[0])).is_loopback
    except ValueError:
        return False


def is_forwarded(scope: dict[str, Any] | Any) -> bool:
    """True when the request carries ``Forwarded``, ``X-Forwarded-For`` or ``X-Real-IP``."""
    return any(bytes(name).lower() in FORWARDING_HEADERS for name, _ in scope.get("headers") or ())


def _bearer(scope: dict[str, Any] | Any) -> bytes | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            scheme, _, credentials = bytes(value).partition(b" ")
            if scheme.lower() == b"bearer" and credentials.strip():
                return credentials.strip()
            return None
    return None


def cookie_value(token: str) -> str:
    """The auth cookie's value for ``token``: an HMAC-SHA256 of a fixed context, in hex.

    Derived rather than the token itself, so what the browser stores is worth only the
    ``"status"`` routes, and a stolen cookie does not reveal a token other tools may share.
    """
    return hmac.new(token.encode(), _COOKIE_CONTEXT, hashlib.sha256).hexdigest()


def _cookies(scope: dict[str, Any] | Any, name: str) -> list[bytes]:
    """Every value of cookie ``name`` in the request (HTTP/2 may split ``Cookie`` headers)."""
    wanted = name.encode()
    found = []
    for header, value in scope.get("headers") or ():
        if bytes(header).lower() != b"cookie":
            continue
        for pair in bytes(value).split(b";"):
            key, sep, content = pair.partition(b"=")
            if sep and key.strip() == wanted:
                found.append(content.strip().strip(b'"'))
    return found


def _cookie_valid(scope: dict[str, Any] | Any, token: str) -> bool:
    expected = cookie_value(token).encode()
    # Every candidate is compared (constant time each), so a decoy cookie cannot shadow it.
    return any([hmac.compare_digest(value, expected) for value in _cookies(scope, AUTH_COOKIE)])


def check_auth(scope: dict[str, Any] | Any, token: str | None,
               access: ControlAccess = "status") -> tuple[int, str] | None:
    """Return ``(status, message)`` when the caller may not use the route, else None.

    403 when no token is configured and the route needs one (``access="token"``, or a
    forwarded or non-loopback request); 401 when a token is configured and neither the bearer
    token nor (on ``"status"`` routes) the auth cookie of a browser login is presented.
    """
    if access == "public":
        return None
    if token is None:
        if access == "token":
            return 403, f"this llm-guard endpoint always needs a token: {_NEEDS_TOKEN}"
        if is_forwarded(scope):
            return 403, f"llm-guard endpoints behind a proxy need a token: {_NEEDS_TOKEN}"
        if is_loopback(scope):
            return None
        return 403, f"llm-guard endpoints answer loopback clients only; {_NEEDS_TOKEN}"
    supplied = _bearer(scope)
    if supplied is not None and hmac.compare_digest(supplied, token.encode()):
        return None
    if access == "status" and _cookie_valid(scope, token):
        return None
    return 401, "missing or invalid bearer token"


class _Reply:
    """The server's ``send`` for one control response: records the start, absorbs failures.

    A ``send`` that raises (the client is gone, the server broke) ends the reply: later messages
    are dropped, so the guard never retries with a second ``http.response.start``.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self.started = False
        self.failed = False

    async def __call__(self, message: Message) -> None:
        if self.failed:
            return
        if message["type"] == "http.response.start":
            self.started = True  # even if the send below fails: it may have gone out
        try:
            await self._send(message)
        except Exception:
            self.failed = True
            logger.debug("llm-guard control response not delivered", exc_info=True)


async def serve_control(
    scope: dict[str, Any] | Any,
    send: Any,
    routes: Mapping[str, ControlRoute],
    prefix: str,
    token: str | None,
    *,
    receive: Receive | None = None,
    on_error: Callable[[str], None] | None = None,
) -> None:
    """Answer one request under ``prefix``: auth, method, route, reply. Never raises.

    A handler that raises is answered with a 500 JSON body (if nothing was sent yet) and
    reported through ``on_error`` (the guard counts and logs it); a failing ``send`` is absorbed.
    ``receive`` lets a streamed reply (:class:`ControlStream`) end when the client leaves;
    without it a stream ends only when a write fails.
    """
    reply = _Reply(send)
    suffix = str(scope.get("path", ""))[len(prefix):]
    try:
        await _dispatch(scope, reply, receive, routes, prefix, suffix, token)
    except Exception:
        if on_error is not None:
            on_error(f"control route {suffix or '/'}")
        else:
            logger.exception("llm-guard control route %s failed", suffix)
        if not reply.started:
            await send_json(reply, 500, {"error": "internal error"})


async def _dispatch(scope: dict[str, Any] | Any, reply: _Reply, receive: Receive | None,
                    routes: Mapping[str, ControlRoute], prefix: str, suffix: str,
                    token: str | None) -> None:
    route = routes.get(suffix)
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    if (route is not None and route.login and token is not None and LOGIN_PARAMETER in query
            and scope.get("method") in ("GET", "HEAD")):
        await _login(scope, reply, query[LOGIN_PARAMETER][0], token, prefix, suffix)
        return
    denied = check_auth(scope, token, route.access if route is not None else "status")
    if denied is not None:
        status, message = denied
        headers = [(b"www-authenticate", b'Bearer realm="llm-guard"')] if status == 401 else []
        await send_json(reply, status, {"error": message}, headers=headers)
        return
    if scope.get("method") not in ("GET", "HEAD"):
        await send_json(reply, 405, {"error": "method not allowed"},
                        headers=[(b"allow", b"GET, HEAD")])
        return
    if route is None:
        await send_json(reply, 404, {"error": "not found", "endpoints": sorted(routes)})
        return
    result = route(query)
    if inspect.isawaitable(result):
        result = await result
    status, document, *rest = result
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
               for k, v in (rest[0] if rest else {}).items()]
    if isinstance(document, ControlBody):
        await send_bytes(reply, status, document.body, document.content_type, headers=headers)
    elif isinstance(document, ControlStream):
        await _stream(reply, receive, status, document, headers)
    else:
        await send_json(reply, status, document, headers=headers)


async def _login(scope: dict[str, Any] | Any, reply: _Reply, supplied: str, token: str,
                 prefix: str, suffix: str) -> None:
    """A browser login: check the token, set the auth cookie, redirect to the bare route.

    The redirect is relative (the route's last segment), so it survives a proxy that serves the
    guard under another path; the cookie's path is the route prefix.
    """
    if not hmac.compare_digest(supplied.encode(), token.encode()):
        await send_json(reply, 401, {"error": "invalid token"},
                        headers=[(b"www-authenticate", b'Bearer realm="llm-guard"')])
        return
    cookie = f"{AUTH_COOKIE}={cookie_value(token)}; Path={prefix}; HttpOnly; SameSite=Strict"
    if scope.get("scheme") == "https":
        cookie += "; Secure"
    location = suffix.rsplit("/", 1)[-1] or "."
    await send_bytes(reply, 303, b"", "text/plain; charset=utf-8", headers=[
        (b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode("latin-1")),
        (b"referrer-policy", b"no-referrer")])


async def _stream(reply: _Reply, receive: Receive | None, status: int, stream: ControlStream,
                  headers: list[tuple[bytes, bytes]]) -> None:
    """Send ``stream``'s chunks until they end, a write fails or the client disconnects.

    The disconnect listener runs beside the writer (a feed may sit idle between events, and a
    write to a vanished client may never fail); either way the iterator is closed.
    """
    iterator = aiter(stream.chunks)
    try:
        await reply({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", stream.content_type.encode("latin-1")),
            (b"cache-control", b"no-store"), (b"x-accel-buffering", b"no"), *headers]})
        async with anyio.create_task_group() as group:
            if receive is not None:
                group.start_soon(_cancel_on_disconnect, receive, group.cancel_scope)
            async for chunk in iterator:
                await reply({"type": "http.response.body", "body": chunk, "more_body": True})
                if reply.failed:
                    break
            else:
                await reply({"type": "http.response.body", "body": b"", "more_body": False})
            group.cancel_scope.cancel()
    finally:
        aclose = getattr(iterator, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await aclose()


async def _cancel_on_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()
