"""The guard's own endpoints under ``/llm-guard/``: status (and what later features add).

They expose internals (sizes, counts, session ids), so they need a bearer token or, when no
token is configured, a loopback client. The token is compared in constant time.
"""

from __future__ import annotations

import hmac
import inspect
import ipaddress
from typing import Any
from urllib.parse import parse_qs

from llm_guard_sdk.asgi.responses import send_json
from llm_guard_sdk.hooks import ControlHandler


def is_loopback(scope: dict[str, Any] | Any) -> bool:
    """True when the ASGI client address is a loopback address (127.0.0.0/8 or ::1)."""
    client = scope.get("client")
    if not client:
        return False
    try:
        return ipaddress.ip_address(str(client[0])).is_loopback
    except ValueError:
        return False


def check_auth(scope: dict[str, Any] | Any, token: str | None) -> tuple[int, str] | None:
    """Return ``(status, message)`` when the caller may not see internals, else None."""
    if token is None:
        if is_loopback(scope):
            return None
        return 403, "llm-guard endpoints answer loopback clients only; set LLM_GUARD_STATUS_TOKEN"
    supplied: bytes | None = None
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            scheme, _, credentials = bytes(value).partition(b" ")
            if scheme.lower() == b"bearer" and credentials.strip():
                supplied = credentials.strip()
            break
    if supplied is None or not hmac.compare_digest(supplied, token.encode()):
        return 401, "missing or invalid bearer token"
    return None


async def serve_control(
    scope: dict[str, Any] | Any,
    send: Any,
    routes: dict[str, ControlHandler],
    prefix: str,
    token: str | None,
) -> None:
    """Answer one request under ``prefix``: auth, method, route, JSON."""
    denied = check_auth(scope, token)
    if denied is not None:
        status, message = denied
        headers = [(b"www-authenticate", b'Bearer realm="llm-guard"')] if status == 401 else []
        await send_json(send, status, {"error": message}, headers=headers)
        return
    if scope.get("method") not in ("GET", "HEAD"):
        await send_json(send, 405, {"error": "method not allowed"},
                        headers=[(b"allow", b"GET, HEAD")])
        return
    handler = routes.get(scope["path"][len(prefix):])
    if handler is None:
        await send_json(send, 404, {"error": "not found", "endpoints": sorted(routes)})
        return
    query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
    result = handler(query)
    if inspect.isawaitable(result):
        result = await result
    status, document = result
    await send_json(send, status, document)
