"""``GET /llm-guard/metrics``: auth like status, the disabled and missing-dependency cases."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from llm_guard_sdk import GuardConfig, GuardMiddleware
from llm_guard_sdk.errors import ConfigError
from tests.metrics.support import metrics_guard, parse
from tests.metrics.test_values import plain_app
from tests.support import make_guard
from tests.support.asgi import client_for

pytestmark = pytest.mark.anyio
TOKEN = "s3cret-token-value"


async def test_loopback_gets_the_text_format() -> None:
    guard, _ = metrics_guard()
    async with client_for(GuardMiddleware(plain_app, guard=guard)) as client:
        response = await client.get("/llm-guard/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE_LATEST
    assert "llm_guard_level" in parse(response.text)


@pytest.mark.parametrize(("token", "client", "headers", "status"), [
    (TOKEN, ("127.0.0.1", 1), {}, 401),
    (TOKEN, ("127.0.0.1", 1), {"authorization": "Bearer wrong-token-x"}, 401),
    (TOKEN, ("10.0.0.8", 1), {"authorization": f"Bearer {TOKEN}"}, 200),
    (None, ("10.0.0.8", 1), {}, 403),
    (None, ("127.0.0.1", 1), {"x-forwarded-for": "1.2.3.4"}, 403),
])
async def test_auth_is_the_status_routes(token: str | None, client: tuple[str, int],
                                         headers: dict[str, str], status: int) -> None:
    guard, _ = metrics_guard(status_token=token)
    async with client_for(GuardMiddleware(plain_app, guard=guard), client=client) as http:
        metrics = await http.get("/llm-guard/metrics", headers=headers)
        status_route = await http.get("/llm-guard/status", headers=headers)
    assert metrics.status_code == status_route.status_code == status
    if status != 200:
        assert "llm_guard" not in metrics.text


async def test_switched_off_there_is_no_route_and_no_extension() -> None:
    guard = make_guard(metrics=False)
    assert guard.extension("metrics") is None
    async with client_for(GuardMiddleware(plain_app, guard=guard)) as client:
        response = await client.get("/llm-guard/metrics")
    assert response.status_code == 404


async def test_on_by_default_where_prometheus_client_is_installed() -> None:
    guard = make_guard()  # LLM_GUARD_METRICS=auto
    assert guard.extension("metrics") is not None
    async with client_for(GuardMiddleware(plain_app, guard=guard)) as client:
        assert (await client.get("/llm-guard/metrics")).status_code == 200


def without_prometheus(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where prometheus_client cannot be imported."""
    prelude = "import sys; sys.modules['prometheus_client'] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True,
                          text=True, timeout=120, check=False)


def test_without_prometheus_client_auto_runs_without_metrics() -> None:
    result = without_prometheus(
        "import llm_guard_sdk\n"
        "from llm_guard_sdk import Guard, GuardConfig\n"
        "guard = Guard(GuardConfig.defaults(sources=('process',)))\n"
        "print('metrics' in guard.extensions, '/metrics' in guard.control_routes)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False False"


def test_without_prometheus_client_switched_on_stops_start_up_naming_the_fix() -> None:
    result = without_prometheus(
        "from llm_guard_sdk import Guard, GuardConfig\n"
        "from llm_guard_sdk.errors import ConfigError, MissingDependencyError\n"
        "try:\n"
        "    Guard(GuardConfig.from_env({'LLM_GUARD_METRICS': '1'}))\n"
        "except ConfigError as exc:\n"
        "    print(isinstance(exc, MissingDependencyError), exc)\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("True prometheus-client")
    assert "LLM_GUARD_METRICS=1" in result.stdout
    assert "pip install 'llm-guard-sdk[prometheus]'" in result.stdout


async def test_the_middleware_fails_the_lifespan_startup_with_that_message(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # type: ignore[arg-type]
    for name in [n for n in sys.modules if n.startswith("llm_guard_sdk.metrics")]:
        monkeypatch.delitem(sys.modules, name)
    app = GuardMiddleware(plain_app, config=GuardConfig.defaults(metrics=True))
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    assert sent[0]["type"] == "lifespan.startup.failed"
    assert "llm-guard-sdk[prometheus]" in sent[0]["message"]
    with pytest.raises(ConfigError, match="LLM_GUARD_METRICS"):
        _ = app.guard
