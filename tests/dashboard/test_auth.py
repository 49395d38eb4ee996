"""Who may open the dashboard: loopback, bearer token, and the browser login's cookie.

The cookie is implemented in asgi/control.py for every ``"status"`` route; these tests go
through the middleware in process, as a browser's requests would arrive.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware
from llm_guard_sdk.asgi.control import AUTH_COOKIE, check_auth, cookie_value
from tests.support import FakeSource, client_for, http_scope

pytestmark = pytest.mark.anyio
TOKEN = "dash-token-123"
REMOTE = ("10.1.2.3", 4000)


def app_for(**config: Any) -> tuple[Guard, GuardMiddleware]:
    guard = Guard(GuardConfig.defaults(sources=("process",), **config), sources=[FakeSource()])

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("a control request reached the app")

    return guard, GuardMiddleware(app, guard=guard)


def cookie_header(value: str) -> dict[str, str]:
    return {"cookie": f"{AUTH_COOKIE}={value}"}


async def test_loopback_without_a_token_opens_the_page() -> None:
    _, middleware = app_for()
    async with client_for(middleware) as client:
        page = await client.get("/llm-guard/dashboard")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"


@pytest.mark.parametrize(("client_address", "headers"), [
    (REMOTE, {}),  # not loopback
    (("127.0.0.1", 5555), {"x-forwarded-for": "203.0.113.9"}),  # a same-host proxy
    (("127.0.0.1", 5555), {"forwarded": "for=203.0.113.9"}),
])
async def test_without_a_token_only_direct_loopback_gets_in(
        client_address: tuple[str, int], headers: dict[str, str]) -> None:
    _, middleware = app_for()
    async with client_for(middleware, client=client_address) as client:
        for path in ("/llm-guard/dashboard", "/llm-guard/dashboard/feed",
                     "/llm-guard/dashboard/dashboard.js"):
            denied = await client.get(path, headers=headers)
            assert denied.status_code == 403, path
            assert "LLM_GUARD_STATUS_TOKEN" in denied.json()["error"]


async def test_with_a_token_a_request_without_it_is_refused() -> None:
    _, middleware = app_for(status_token=TOKEN)
    async with client_for(middleware) as client:  # loopback is not enough any more
        denied = await client.get("/llm-guard/dashboard")
        bearer = await client.get("/llm-guard/dashboard",
                                  headers={"authorization": f"Bearer {TOKEN}"})
    assert denied.status_code == 401
    assert denied.headers["www-authenticate"] == 'Bearer realm="llm-guard"'
    assert bearer.status_code == 200


async def test_login_sets_a_strict_http_only_cookie_and_drops_the_token_from_the_url() -> None:
    _, middleware = app_for(status_token=TOKEN)
    async with client_for(middleware, client=REMOTE) as client:
        login = await client.get(f"/llm-guard/dashboard?token={TOKEN}")
        assert login.status_code == 303
        assert login.headers["location"] == "dashboard"  # relative: survives a path proxy
        assert TOKEN not in login.headers["location"]
        cookie = login.headers["set-cookie"]
        attributes = [part.strip() for part in cookie.split(";")]
        assert attributes[0] == f"{AUTH_COOKIE}={cookie_value(TOKEN)}"
        assert {"Path=/llm-guard", "HttpOnly", "SameSite=Strict"} <= set(attributes)
        assert "Secure" not in attributes  # plain http: a browser would drop a Secure cookie
        assert TOKEN not in cookie  # the cookie holds an HMAC, never the token
        assert login.headers["cache-control"] == "no-store"
        # The client's jar now sends the cookie: every "status" route lets it in.
        page = await client.get("/llm-guard/dashboard")
        script = await client.get("/llm-guard/dashboard/dashboard.js")
        status = await client.get("/llm-guard/status")
    assert (page.status_code, script.status_code, status.status_code) == (200, 200, 200)
    assert status.json()["level"] == "normal"


async def test_a_wrong_login_token_is_refused_without_a_cookie() -> None:
    _, middleware = app_for(status_token=TOKEN)
    async with client_for(middleware) as client:
        wrong = await client.get("/llm-guard/dashboard?token=not-the-token")
        empty = await client.get("/llm-guard/dashboard?token=")
        page = await client.get("/llm-guard/dashboard")
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    assert wrong.json() == {"error": "invalid token"}
    assert empty.status_code == 401  # an empty value is a parameter with a wrong token
    assert page.status_code == 401


@pytest.mark.parametrize("value", [
    "nonsense", TOKEN,  # the raw token is not the cookie's value
    cookie_value("another-token-1"), cookie_value(TOKEN)[:-1], ""])
async def test_a_wrong_cookie_is_refused(value: str) -> None:
    _, middleware = app_for(status_token=TOKEN)
    async with client_for(middleware) as client:
        denied = await client.get("/llm-guard/dashboard", headers=cookie_header(value))
    assert denied.status_code == 401


async def test_the_cookie_works_behind_a_proxy_and_beside_other_cookies() -> None:
    _, middleware = app_for(status_token=TOKEN)
    cookies = f"theme=dark; {AUTH_COOKIE}=decoy; {AUTH_COOKIE}={cookie_value(TOKEN)}"
    async with client_for(middleware) as client:
        forwarded = await client.get("/llm-guard/status", headers={
            "x-forwarded-for": "203.0.113.9", "cookie": cookies})
    assert forwarded.status_code == 200


async def test_the_cookie_never_opens_token_only_routes() -> None:
    guard, middleware = app_for(status_token=TOKEN)
    guard.add_control_route("/costly", lambda _: (200, {"ok": True}), access="token")
    async with client_for(middleware) as client:
        cookie = await client.get("/llm-guard/costly", headers=cookie_header(cookie_value(TOKEN)))
        bearer = await client.get("/llm-guard/costly",
                                  headers={"authorization": f"Bearer {TOKEN}"})
    assert cookie.status_code == 401 and bearer.status_code == 200


async def test_only_login_routes_take_the_token_from_the_query() -> None:
    _, middleware = app_for(status_token=TOKEN)
    async with client_for(middleware) as client:
        status = await client.get(f"/llm-guard/status?token={TOKEN}")
        feed = await client.get(f"/llm-guard/dashboard/feed?token={TOKEN}")
    assert status.status_code == 401 and "set-cookie" not in status.headers
    assert feed.status_code == 401


async def test_without_a_token_the_login_parameter_is_ignored() -> None:
    _, middleware = app_for()
    async with client_for(middleware) as client:
        page = await client.get("/llm-guard/dashboard?token=whatever-123")
    assert page.status_code == 200 and "set-cookie" not in page.headers


async def test_https_and_a_custom_prefix_shape_the_cookie() -> None:
    _, middleware = app_for(status_token=TOKEN, route_prefix="/ops/guard")
    transport = httpx.ASGITransport(app=middleware, client=REMOTE)
    async with httpx.AsyncClient(transport=transport, base_url="https://testserver") as client:
        login = await client.get(f"/ops/guard/dashboard?token={TOKEN}")
        page = await client.get("/ops/guard/dashboard")
    attributes = [part.strip() for part in login.headers["set-cookie"].split(";")]
    assert {"Path=/ops/guard", "Secure", "HttpOnly", "SameSite=Strict"} <= set(attributes)
    assert page.status_code == 200


def test_check_auth_takes_the_cookie_only_for_status_routes() -> None:
    scope = http_scope("/llm-guard/status", client=REMOTE,
                       headers=[(b"cookie", f"{AUTH_COOKIE}={cookie_value(TOKEN)}".encode())])
    assert check_auth(scope, TOKEN, "status") is None
    assert check_auth(scope, TOKEN, "token") == (401, "missing or invalid bearer token")
    assert check_auth(scope, None, "status") is not None  # no token: the cookie means nothing
    assert check_auth(scope, "other-token-1", "status") is not None


def test_login_routes_must_be_status_routes() -> None:
    guard, _ = app_for()
    with pytest.raises(ValueError, match="login=True needs access='status'"):
        guard.add_control_route("/x", lambda _: (200, {}), access="token", login=True)
