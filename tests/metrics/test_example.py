"""examples/metrics_mount.py: the guard's figures on the app's own /metrics."""

from __future__ import annotations

import pytest

from tests.metrics.support import parse
from tests.support.asgi import client_for

pytestmark = pytest.mark.anyio


async def test_the_guard_and_the_app_share_one_metrics_route() -> None:
    from prometheus_client import REGISTRY

    from examples.metrics_mount import app, guard

    assert guard.extension("metrics").registry is REGISTRY  # the explicit one, not auto's
    async with client_for(app) as client:
        assert (await client.get("/hello")).status_code == 200
        response = await client.get("/metrics/")
    assert response.status_code == 200
    families = parse(response.text)
    assert families["myapp_hellos"].samples[0].value == 1
    assert "llm_guard_level" in families and "llm_guard_memory_pressure_ratio" in families
    assert families["llm_guard_sessions_opened"].type == "counter"
