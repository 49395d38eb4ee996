"""The guard's edges under real uvicorn (default settings, so ``proxy_headers`` is on).

One pressure app (``tests/support/pressure_app.py``) without a status token: a failing control
route, probes while shedding, readiness, and proxy headers in front of loopback-only routes.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support import uvicorn_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    env = {"LLM_GUARD_SAMPLE_INTERVAL": "0.05", "LLM_GUARD_RETRY_AFTER": "7",
           "LLM_GUARD_SNAPSHOT_MIN_INTERVAL": "0"}
    with uvicorn_server("tests.support.pressure_app:app", env,
                        ready_path="/llm-guard/ready") as base:
        yield base


@pytest.fixture
def http(server: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server, timeout=30, trust_env=False) as client:
        yield client
        assert client.post("/test/pressure", params={"used": 0}).json()["level"] == "normal"


def test_failing_control_route_is_a_500_from_the_guard(http: httpx.Client) -> None:
    before = http.get("/llm-guard/status").json()["errors"]["internal_total"]
    response = http.get("/llm-guard/fail")
    after = http.get("/llm-guard/status").json()["errors"]["internal_total"]
    assert response.status_code == 500  # the app would have answered 200 "ok"
    assert response.json() == {"error": "internal error"}
    assert after == before + 1
    assert http.get("/llm-guard/status").status_code == 200  # the server is fine


def test_probes_are_never_shed_and_ready_follows_the_level(http: httpx.Client) -> None:
    assert http.get("/llm-guard/ready").json() == {"ready": True}
    assert http.post("/test/pressure", params={"used": 950}).json()["level"] == "shed"
    probes = {path: http.get(path) for path in
              ("/healthz", "/health/live", "/readyz", "/livez", "/metrics")}
    app = http.get("/api/chat")
    ready = http.get("/llm-guard/ready")
    status = http.get("/llm-guard/status")
    assert {path: (r.status_code, r.text) for path, r in probes.items()} == \
        dict.fromkeys(probes, (200, "ok"))
    assert app.status_code == 503 and app.json()["reason"] == "memory_pressure"
    assert ready.status_code == 503 and ready.json() == {"ready": False}
    assert ready.headers["retry-after"] == "7"
    assert status.status_code == 200 and status.json()["level"] == "shed"
    http.post("/test/pressure", params={"used": 0})
    assert http.get("/llm-guard/ready").status_code == 200
    assert http.get("/api/chat").text == "ok"


@pytest.mark.parametrize("header", [
    # uvicorn trusts X-Forwarded-For from 127.0.0.1 and rewrites the client to this address:
    {"x-forwarded-for": "127.0.0.1"},
    {"x-forwarded-for": "203.0.113.9, 127.0.0.1"},
    {"forwarded": "for=127.0.0.1"},
    {"x-real-ip": "127.0.0.1"},
])
def test_proxy_headers_make_loopback_untrusted(http: httpx.Client, header: dict[str, str]
                                               ) -> None:
    assert http.get("/llm-guard/status").status_code == 200  # plain loopback: allowed
    proxied = http.get("/llm-guard/status", headers=header)
    assert proxied.status_code == 403
    assert "behind a proxy" in proxied.json()["error"]
    assert http.get("/llm-guard/ready", headers=header).status_code == 200  # public


def test_snapshot_route_needs_a_token_even_from_loopback(http: httpx.Client) -> None:
    response = http.get("/llm-guard/snapshot")
    assert response.status_code == 403
    assert "LLM_GUARD_STATUS_TOKEN" in response.json()["error"]
