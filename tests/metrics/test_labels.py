"""Bounded label values: no session ids, paths or text; capped reasons and tenants."""

from __future__ import annotations

import pytest

from llm_guard_sdk import GuardMiddleware
from llm_guard_sdk.metrics import GuardMetrics, LabelCap
from llm_guard_sdk.session import CloseReason
from tests.metrics.support import metrics_guard, scrape, value
from tests.metrics.test_values import plain_app
from tests.support.asgi import client_for
from tests.support.guard import idle

pytestmark = pytest.mark.anyio


def test_a_label_cap_keeps_the_first_values_then_says_other() -> None:
    cap = LabelCap(2)
    assert [cap(v) for v in ("a", "b", "c", "a", "d", "b")] == ["a", "b", "other", "a",
                                                                 "other", "b"]
    with pytest.raises(ValueError, match="limit"):
        LabelCap(0)


async def test_no_session_id_path_or_request_text_reaches_a_label() -> None:
    guard, metrics = metrics_guard(tenant_header="x-tenant")
    secret_path = "/chat/SECRET-PROMPT-TEXT"
    app = GuardMiddleware(plain_app, guard=guard)
    async with client_for(app) as client:
        for _ in range(3):
            response = await client.get(secret_path, headers={"x-request-id": "REQ-ID-123",
                                                              "x-tenant": "acme"})
            assert response.status_code == 200
    sessions = [idle(guard, 10) for _ in range(3)]
    for session in sessions:
        await guard.close_session(session, CloseReason.EVICTED)
    guard.registry.open("websocket", secret_path, label="REQ-ID-456", tenant="acme")
    metrics.publisher.update_slow(guard)
    samples = scrape(guard, metrics)
    labels = {v for s in samples for v in s.labels.values()}
    assert labels, "some labelled series exist"
    for session in sessions:
        assert not any(session.id in v or session.id[:8] in v for v in labels)
    assert not any("SECRET" in v or "REQ-ID" in v or "/chat" in v for v in labels)
    assert value(samples, "llm_guard_tenant_sessions", tenant="acme") == 1  # tenants are kept


async def test_tenants_are_the_top_n_plus_other() -> None:
    guard, metrics = metrics_guard(tenant_status_top=2, tenant_header="x-tenant")
    for i, tenant in enumerate(("t1", "t2", "t3", "t4", "t5")):
        for _ in range(5 - i):
            guard.registry.open("websocket", tenant=tenant)
    metrics.publisher.update_slow(guard)
    samples = scrape(guard, metrics)
    tenants = {s.labels["tenant"]: s.value for s in samples
               if s.name == "llm_guard_tenant_sessions"}
    assert tenants == {"t1": 5, "t2": 4, "other": 3 + 2 + 1}


async def test_free_form_reasons_are_capped() -> None:
    guard, metrics = metrics_guard(metrics=GuardMetrics(max_label_values=3))
    reasons = iter(f"check-{i}" for i in range(10))
    guard.add_admission_check(lambda: next(reasons))
    app = GuardMiddleware(plain_app, guard=guard)
    async with client_for(app) as client:
        for _ in range(10):
            assert (await client.get("/x")).status_code == 503
    samples = scrape(guard, metrics)
    shed = {s.labels["reason"]: s.value for s in samples if s.name == "llm_guard_shed_total"}
    assert shed == {"check-0": 1, "check-1": 1, "check-2": 1, "other": 7}


async def test_without_tenant_keys_no_tenant_pass_is_made() -> None:
    guard, metrics = metrics_guard()  # no tenant header: every session is the default tenant's
    guard.registry.open("websocket")
    metrics.publisher.update_slow(guard)
    assert not [s for s in scrape(guard, metrics) if s.name == "llm_guard_tenant_sessions"]
