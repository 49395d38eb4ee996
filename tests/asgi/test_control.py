"""The guard's own routes in process: errors never reach the app, auth behind proxies, readiness,
and which paths shedding never touches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware
from llm_guard_sdk.asgi.control import check_auth, is_forwarded
from llm_guard_sdk.asgi.middleware import path_matches
from llm_guard_sdk.config import DEFAULT_EXEMPT_PATHS
from llm_guard_sdk.hooks import ControlBody, ControlStream
from tests.support import FakeSource, ProtocolSend, client_for, http_scope, receive_request
from tests.support.polling import until

pytestmark = pytest.mark.anyio
TOKEN = "control-token-1"


class App:
    """The protected app: records every call and answers 200 "app"."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"app"})


def make(**config: Any) -> tuple[Guard, FakeSource, App, GuardMiddleware]:
    fake = FakeSource()
    guard = Guard(GuardConfig(sources=("process",), **config), sources=[fake])
    app = App()
    return guard, fake, app, GuardMiddleware(app, guard=guard)


def shed(guard: Guard, fake: FakeSource) -> None:
    fake.used = 990
    guard.sample_now()
    assert guard.policy.level.label == "shed"


async def call(middleware: GuardMiddleware, path: str, send: ProtocolSend, **scope: Any) -> None:
    await middleware(http_scope(path, **scope), receive_request(), send)
    send.close()


# -- A6: a control route that raises or whose send fails -------------------------------------


def boom(query: dict[str, list[str]]) -> tuple[int, Any]:
    raise RuntimeError("handler bug")


async def async_boom(query: dict[str, list[str]]) -> tuple[int, Any]:
    raise KeyError("async handler bug")


@pytest.mark.parametrize("handler", [boom, async_boom, lambda q: "not a tuple",
                                     lambda q: (200, {"not": {1, 2}})])
async def test_failing_handler_is_a_500_from_the_guard(
        handler: Any, caplog: pytest.LogCaptureFixture) -> None:
    guard, _, app, middleware = make()
    guard.add_control_route("/boom", handler)
    send = ProtocolSend()
    await call(middleware, "/llm-guard/boom", send)
    assert app.calls == []  # never falls through to the app
    assert send.violations == []
    assert send.status == 500 and send.json() == {"error": "internal error"}
    assert guard.internal_errors_total == 1
    assert "control route /boom" in caplog.text


@pytest.mark.parametrize("fail_on", ["http.response.start", "http.response.body"])
@pytest.mark.parametrize("route", ["/status", "/boom", "/missing"])
async def test_failing_send_is_absorbed_without_a_second_start(fail_on: str, route: str) -> None:
    guard, _, app, middleware = make()
    guard.add_control_route("/boom", boom)
    send = ProtocolSend(fail_on=fail_on)
    await call(middleware, f"/llm-guard{route}", send)  # does not raise
    assert app.calls == []
    assert send.violations == []
    assert send.types.count("http.response.start") == 1
    assert send.types[-1] == fail_on  # nothing more after the failure
    assert guard.internal_errors_total == (1 if route == "/boom" else 0)


# -- C5: loopback is not trusted behind a proxy; route access levels -------------------------


@pytest.mark.parametrize("header", [b"x-forwarded-for", b"X-Forwarded-For", b"forwarded",
                                    b"x-real-ip"])
async def test_forwarding_headers_need_a_token(header: bytes) -> None:
    headers = [(b"host", b"testserver"), (header, b"127.0.0.1")]
    _, _, _, middleware = make()
    send = ProtocolSend()
    await call(middleware, "/llm-guard/status", send, headers=headers)
    assert send.status == 403 and "behind a proxy" in send.json()["error"]
    plain = ProtocolSend()
    await call(middleware, "/llm-guard/status", plain)  # same client, no proxy header
    assert plain.status == 200

    _, _, _, middleware = make(status_token=TOKEN)
    for authorization, status in ((None, 401), (b"Bearer wrong-token-1", 401),
                                  (f"Bearer {TOKEN}".encode(), 200)):
        send = ProtocolSend()
        extra = [(b"authorization", authorization)] if authorization else []
        await call(middleware, "/llm-guard/status", send, headers=[*headers, *extra])
        assert send.status == status, authorization


def test_check_auth_by_access() -> None:
    loopback = http_scope("/")
    proxied = http_scope("/", headers=[(b"forwarded", b"for=10.0.0.1")])
    remote = http_scope("/", client=("10.0.0.7", 1))
    assert is_forwarded(proxied) and not is_forwarded(loopback)
    assert check_auth(loopback, None) is None
    assert check_auth(remote, None) == (403, check_auth(remote, None)[1])  # type: ignore[index]
    for scope in (loopback, proxied, remote):
        assert check_auth(scope, None, "public") is None
        assert check_auth(scope, TOKEN, "public") is None
        denied = check_auth(scope, None, "token")
        assert denied is not None and denied[0] == 403 and "always needs a token" in denied[1]
        assert check_auth(scope, TOKEN, "token") == (401, "missing or invalid bearer token")
    guard, _, _, _ = make()
    with pytest.raises(ValueError, match="access must be one of"):
        guard.add_control_route("/x", boom, access="everyone")  # type: ignore[arg-type]


# -- C2: readiness and the paths shedding never touches --------------------------------------


async def test_ready_route_is_public_and_follows_the_shed_level() -> None:
    guard, fake, app, middleware = make(status_token=TOKEN)
    remote = ("10.9.8.7", 4000)
    async with client_for(middleware, client=remote) as client:
        ready = await client.get("/llm-guard/ready", headers={"x-forwarded-for": "1.2.3.4"})
        head = await client.head("/llm-guard/ready")
        post = await client.post("/llm-guard/ready")
        assert (await client.get("/llm-guard/status")).status_code == 401  # status stays private
        fake.used = 800  # evict level: still ready
        guard.sample_now()
        evicting = await client.get("/llm-guard/ready")
        shed(guard, fake)
        shedding = await client.get("/llm-guard/ready")
        refused = await client.get("/api")
        fake.used = 0
        guard.sample_now()
        recovered = await client.get("/llm-guard/ready")
    assert ready.status_code == 200 and ready.json() == {"ready": True}
    assert head.status_code == 200 and post.status_code == 405
    assert evicting.status_code == 200
    assert shedding.status_code == 503 and shedding.json() == {"ready": False}
    assert shedding.headers["retry-after"] == str(guard.config.retry_after)
    assert refused.status_code == 503  # the app itself is shed
    assert recovered.status_code == 200
    assert app.calls == []


EXEMPT = ["/health", "/healthz", "/health/live", "/healthcheck", "/ready", "/readyz",
          "/ready/db", "/livez", "/livez/ping", "/metrics", "/metrics/custom"]
SHED = ["/", "/api", "/livezz", "/metricsx", "/v1/health", "/heal", "/chat"]


async def test_default_exempt_paths_are_never_shed() -> None:
    guard, fake, app, middleware = make()
    assert guard.config.exempt_paths == DEFAULT_EXEMPT_PATHS
    shed(guard, fake)
    async with client_for(middleware) as client:
        answers = {path: (await client.get(path)).status_code for path in EXEMPT + SHED}
        guard_routes = [(await client.get(f"/llm-guard{r}")).status_code
                        for r in ("/status", "/ready")]
    assert answers == {**dict.fromkeys(EXEMPT, 200), **dict.fromkeys(SHED, 503)}
    assert app.calls == EXEMPT
    assert guard_routes == [200, 503]  # served while shedding (ready says so)
    assert guard.registry.counters.opened_total == 0  # exempt paths are not guarded either


async def test_configured_exempt_paths_replace_the_defaults() -> None:
    guard, fake, _, middleware = make(exempt_paths="/internal,/probe*")
    shed(guard, fake)
    async with client_for(middleware) as client:
        answers = [(await client.get(p)).status_code
                   for p in ("/internal/x", "/probes", "/healthz", "/llm-guard/ready")]
    assert answers == [200, 200, 503, 503]


def test_path_matches() -> None:
    assert path_matches("/health", ("/health*",)) and path_matches("/healthz", ("/health*",))
    assert path_matches("/metrics", ("/metrics",)) and path_matches("/metrics/a", ("/metrics",))
    assert not path_matches("/metricsx", ("/metrics",))
    assert not path_matches("/x/health", ("/health*",))
    assert not path_matches("/anything", ())


# -- Reply kinds: raw bytes (metrics, dashboard page) and a live stream (dashboard feed) ------


async def test_a_body_reply_keeps_its_bytes_and_content_type() -> None:
    guard, _, app, middleware = make()
    guard.add_control_route("/text", lambda _: (200, ControlBody(b"a 1\n", "text/plain")))
    send = ProtocolSend()
    await call(middleware, "/llm-guard/text", send)
    assert send.violations == []
    start = send.messages[0]
    assert start["status"] == 200
    assert (b"content-type", b"text/plain") in start["headers"]
    assert (b"content-length", b"4") in start["headers"]
    assert send.body == b"a 1\n" and app.calls == []


async def test_live_is_public_and_answers_while_shedding() -> None:
    guard, fake, app, middleware = make(status_token=TOKEN)
    shed(guard, fake)
    async with client_for(middleware, client=("10.9.8.7", 4000)) as client:
        live = await client.get("/llm-guard/live")
    assert live.status_code == 200 and live.json() == {"alive": True} and app.calls == []


class Feed:
    """A stream route's iterator: yields ``count`` events, then waits forever; records aclose."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.closed = asyncio.Event()

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            for n in range(self.count):
                yield f"data: {n}\n\n".encode()
            await asyncio.get_running_loop().create_future()
        finally:
            self.closed.set()


async def test_a_stream_reply_ends_when_the_client_disconnects() -> None:
    guard, _, _, middleware = make()
    feed = Feed(2)
    guard.add_control_route("/feed", lambda _: (200, ControlStream(feed.chunks())))
    send = ProtocolSend()
    disconnect = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    task = asyncio.create_task(middleware(http_scope("/llm-guard/feed"), receive, send))
    await until(lambda: send.body.count(b"data:") == 2, timeout=30)
    disconnect.set()
    await asyncio.wait_for(task, 30)
    send.close()
    assert feed.closed.is_set() and send.violations == []
    start = send.messages[0]
    assert (b"content-type", b"text/event-stream") in start["headers"]
    assert send.body == b"data: 0\n\ndata: 1\n\n"


async def test_a_stream_that_ends_ends_the_response() -> None:
    guard, _, _, middleware = make()

    async def three() -> AsyncIterator[bytes]:
        for n in range(3):
            yield str(n).encode()

    guard.add_control_route("/three", lambda _: (200, ControlStream(three(), "text/plain")))
    send = ProtocolSend()
    await call(middleware, "/llm-guard/three", send)
    assert send.violations == [] and send.body == b"012"
    assert send.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_a_stream_whose_write_fails_is_closed() -> None:
    guard, _, _, middleware = make()
    feed = Feed(5)
    guard.add_control_route("/feed", lambda _: (200, ControlStream(feed.chunks())))
    send = ProtocolSend(fail_on="http.response.body")
    await asyncio.wait_for(call(middleware, "/llm-guard/feed", send), 30)
    assert feed.closed.is_set()
    assert send.types == ["http.response.start", "http.response.body"]
