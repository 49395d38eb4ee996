"""Responses the guard itself sends: shed (503), over quota (429), auth errors, JSON documents.

A refused WebSocket handshake is denied with the same status where the server supports
``websocket.http.response``, else accepted and closed with 1013 (shed) or 1008 (over quota).
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.typing import ASGISendCallable

JSON_HEADERS = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
WS_TRY_AGAIN_LATER = 1013
WS_GOING_AWAY = 1001
WS_POLICY_VIOLATION = 1008
WS_MESSAGE_TOO_BIG = 1009


async def send_json(
    send: Any,
    status: int,
    document: Any,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    websocket: bool = False,
) -> None:
    """Send a complete JSON response (or a ``websocket.http.response`` denial)."""
    body = json.dumps(document, separators=(",", ":")).encode()
    prefix = "websocket.http.response" if websocket else "http.response"
    await send({
        "type": f"{prefix}.start",
        "status": status,
        "headers": [*JSON_HEADERS, (b"content-length", str(len(body)).encode()),
                    *(headers or [])],
    })
    await send({"type": f"{prefix}.body", "body": body, "more_body": False})


async def send_bytes(
    send: Any,
    status: int,
    body: bytes,
    content_type: str,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Send a complete response of ``content_type`` (the metrics text, the dashboard page)."""
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", content_type.encode("latin-1")),
                    (b"cache-control", b"no-store"),
                    (b"content-length", str(len(body)).encode()), *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body, "more_body": False})


def shed_document(reason: str, retry_after: int) -> dict[str, Any]:
    """The short JSON body of a 503: machine-readable reason and when to retry."""
    return {"error": "overloaded", "reason": reason, "retry_after": retry_after}


def quota_document(reason: str, retry_after: int) -> dict[str, Any]:
    """The short JSON body of a 429: the client's own quota, not the server's pressure."""
    return {"error": "over_quota", "reason": reason, "retry_after": retry_after}


async def shed_http(send: ASGISendCallable | Any, reason: str, retry_after: int) -> None:
    """Refuse an HTTP request: 503 with ``Retry-After``."""
    await send_json(send, 503, shed_document(reason, retry_after),
                    headers=[(b"retry-after", str(retry_after).encode())])


async def over_quota_http(send: ASGISendCallable | Any, reason: str, retry_after: int) -> None:
    """Refuse an HTTP request over its tenant's quota: 429 with ``Retry-After``."""
    await send_json(send, 429, quota_document(reason, retry_after),
                    headers=[(b"retry-after", str(retry_after).encode())])


async def over_quota_websocket(
    scope: dict[str, Any] | Any, send: Any, reason: str, retry_after: int
) -> None:
    """Refuse a WebSocket handshake over its tenant's quota.

    A 429 with ``Retry-After`` through ``websocket.http.response``; without it the handshake is
    accepted and closed with 1008 (Policy Violation) and the reason.
    """
    if "websocket.http.response" in (scope.get("extensions") or {}):
        await send_json(send, 429, quota_document(reason, retry_after),
                        headers=[(b"retry-after", str(retry_after).encode())], websocket=True)
        return
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": WS_POLICY_VIOLATION,
                "reason": f"over quota: {reason}"[:120]})


async def shed_websocket(
    scope: dict[str, Any] | Any, send: Any, reason: str, retry_after: int
) -> None:
    """Refuse a WebSocket handshake.

    With the ``websocket.http.response`` extension the client gets a real 503 with
    ``Retry-After``; otherwise the handshake is accepted and closed at once with 1013 (Try Again
    Later), the only way a browser client can learn why.
    """
    extensions = scope.get("extensions") or {}
    if "websocket.http.response" in extensions:
        await send_json(send, 503, shed_document(reason, retry_after),
                        headers=[(b"retry-after", str(retry_after).encode())], websocket=True)
        return
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.close", "code": WS_TRY_AGAIN_LATER,
                "reason": f"overloaded: {reason}"[:120]})
