"""Tenant keys and quotas at the ASGI edge (asgi/middleware.py): 429s, WebSocket denials."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.testing import ApplicationCommunicator

from llm_guard_sdk import GuardMiddleware
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.context import SCOPE_KEY
from llm_guard_sdk.guard import Guard
from tests.support import FakeSource, client_for
from tests.support.asgi import ws_scope

pytestmark = pytest.mark.anyio


async def app(scope: Any, receive: Any, send: Any) -> None:
    """HTTP: answers ``tenant priority`` of its session. WebSocket: accepts, waits for the end."""
    session = scope.get(SCOPE_KEY)
    if scope["type"] == "http":
        body = f"{session.tenant} {session.priority.label}".encode() if session else b"-"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})
        return
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while (await receive())["type"] != "websocket.disconnect":
        pass


def guard_with(**overrides: Any) -> Guard:
    config = GuardConfig.defaults(sources=("process",), tenant_header="x-tenant", **overrides)
    return Guard(config, sources=[FakeSource(used=0, limit=1000)])


async def test_session_gets_tenant_and_priority_from_headers() -> None:
    guard = guard_with(tenant_priorities="gold=high", priority_header="x-priority")
    async with client_for(GuardMiddleware(app, guard=guard)) as client:
        assert (await client.get("/", headers={"x-tenant": "gold"})).text == "gold high"
        assert (await client.get("/")).text == "default normal"
        hostile = {"x-tenant": "a" * 500, "x-priority": "low"}
        assert (await client.get("/", headers=hostile)).text == "default low"
    assert guard.status()["tenant_keys"]["invalid_total"] == 1


async def test_a_tenant_over_its_cap_gets_429_while_others_are_served() -> None:
    guard = guard_with(tenant_max_sessions=1, retry_after=9)
    held = ApplicationCommunicator(GuardMiddleware(app, guard=guard),
                                   ws_scope("/ws", headers=[(b"x-tenant", b"acme")]))
    await held.send_input({"type": "websocket.connect"})
    assert (await held.receive_output(2))["type"] == "websocket.accept"
    async with client_for(GuardMiddleware(app, guard=guard)) as client:
        refused = await client.get("/", headers={"x-tenant": "acme"})
        served = await client.get("/", headers={"x-tenant": "other"})
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "9"
    assert refused.json() == {"error": "over_quota", "reason": "tenant_quota", "retry_after": 9}
    assert served.status_code == 200 and served.text == "other normal"
    status = guard.status()
    assert status["tenants"]["acme"] == {"sessions": 1, "held_bytes": 0, "refused_total": 1}
    assert status["sessions"]["shed_total"] == 1
    await held.send_input({"type": "websocket.disconnect", "code": 1000})
    await held.wait(2)
    async with client_for(GuardMiddleware(app, guard=guard)) as client:
        assert (await client.get("/", headers={"x-tenant": "acme"})).status_code == 200


@pytest.mark.parametrize("with_extension", [True, False])
async def test_websocket_over_quota_is_denied_with_429_or_closed_with_1008(
        with_extension: bool) -> None:
    guard = guard_with(tenant_max_sessions=1)
    guard.registry.open("websocket", tenant="acme")
    extensions: dict[str, Any] = {"websocket.http.response": {}} if with_extension else {}
    comm = ApplicationCommunicator(GuardMiddleware(app, guard=guard), ws_scope(
        "/ws", headers=[(b"x-tenant", b"acme")], extensions=extensions))
    await comm.send_input({"type": "websocket.connect"})
    first = await comm.receive_output(2)
    if with_extension:
        assert first["type"] == "websocket.http.response.start"
        assert first["status"] == 429
        assert (b"retry-after", b"5") in first["headers"]
        body = await comm.receive_output(2)
        assert json.loads(body["body"])["reason"] == "tenant_quota"
    else:
        assert first == {"type": "websocket.accept"}
        close = await comm.receive_output(2)
        assert close == {"type": "websocket.close", "code": 1008,
                         "reason": "over quota: tenant_quota"}
    await comm.wait(2)


async def test_a_raising_tenant_key_function_never_reaches_the_app() -> None:
    def key(scope: Any) -> str:
        raise RuntimeError("bad token")

    middleware = GuardMiddleware(app, config=GuardConfig.defaults(sources=("process",)),
                                 tenant_key=key)
    async with client_for(middleware) as client:
        responses = [await client.get("/") for _ in range(3)]
    assert [r.text for r in responses] == ["default normal"] * 3
    assert middleware.guard.status()["tenant_keys"]["errors_total"] == 3
    assert middleware.guard.internal_errors_total == 0


def test_tenant_key_with_a_shared_guard_is_refused() -> None:
    with pytest.raises(TypeError, match="give tenant_key to the Guard"):
        GuardMiddleware(app, guard=guard_with(), tenant_key=lambda scope: "a")
