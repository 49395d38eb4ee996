"""Tenants (llm_guard_sdk/tenants): keys from headers or a callable, the book, status."""

from __future__ import annotations

from typing import Any

import pytest

from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import CloseReason
from llm_guard_sdk.tenants import TenantBook, TenantResolver
from tests.support.guard import fake_source, make_guard


def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "path": "/", "headers": [(b"host", b"x"), *headers]}


# -- keys ------------------------------------------------------------------------------


def test_header_key_and_missing_header_maps_to_the_default() -> None:
    resolver = TenantResolver(header="x-tenant", default="anon")
    assert resolver.resolve(scope((b"x-tenant", b"acme"))) == ("acme", Priority.NORMAL)
    assert resolver.resolve(scope()) == ("anon", Priority.NORMAL)
    assert resolver.resolve({"type": "http"}) == ("anon", Priority.NORMAL)  # no headers at all
    assert resolver.invalid_total == 0


@pytest.mark.parametrize("value", [
    b"a" * 65,  # oversized
    b"acme\r\nx-admin: 1",  # control characters
    b"acme corp",  # a space
    "acm\u00e9".encode(),  # non-ASCII
    b"",  # empty
])
def test_hostile_header_values_map_to_the_default_and_are_counted(value: bytes) -> None:
    resolver = TenantResolver(header="x-tenant")
    assert resolver.resolve(scope((b"x-tenant", value))) == ("default", Priority.NORMAL)
    assert resolver.invalid_total == 1


def test_a_raising_key_function_falls_back_to_the_default_and_is_counted() -> None:
    def broken(_: Any) -> str:
        raise KeyError("no tenant in the token")

    resolver = TenantResolver(key_function=broken, header="x-tenant")
    for _ in range(3):
        assert resolver.resolve(scope((b"x-tenant", b"acme"))) == ("default", Priority.NORMAL)
    assert resolver.errors_total == 3
    assert resolver.describe()["source"] == "function"


def test_key_function_answers_are_vetted_like_headers() -> None:
    answers: list[Any] = ["acme", None, 42, "x" * 65, "tab\there"]
    resolver = TenantResolver(key_function=lambda _: answers.pop(0))
    got = [resolver.resolve(scope())[0] for _ in range(5)]
    assert got == ["acme", "default", "default", "default", "default"]
    assert resolver.invalid_total == 3 and resolver.errors_total == 0


def test_priority_from_the_tenant_map_and_the_priority_header() -> None:
    resolver = TenantResolver(header="x-tenant", priorities={"gold": "high", "free": "low"},
                              priority_header="x-priority")
    assert resolver.resolve(scope((b"x-tenant", b"gold")))[1] is Priority.HIGH
    assert resolver.resolve(scope((b"x-tenant", b"free")))[1] is Priority.LOW
    assert resolver.resolve(scope((b"x-tenant", b"other")))[1] is Priority.NORMAL
    header = (b"x-priority", b"HIGH")
    assert resolver.resolve(scope((b"x-tenant", b"free"), header))[1] is Priority.HIGH
    bogus = (b"x-priority", b"urgent")  # not a class: the tenant's class stands
    assert resolver.resolve(scope((b"x-tenant", b"free"), bogus))[1] is Priority.LOW


def test_unknown_priority_class_fails_start_up_naming_the_setting() -> None:
    with pytest.raises(ConfigError, match="LLM_GUARD_TENANT_PRIORITIES='a=urgent'"):
        GuardConfig.from_env({"LLM_GUARD_TENANT_PRIORITIES": "a=urgent"})
    with pytest.raises(ConfigError, match="tenant_priorities"):
        GuardConfig.defaults(tenant_priorities={"a": "gold"})
    with pytest.raises(ConfigError, match="LLM_GUARD_TENANT_MAX_SESSIONS"):
        GuardConfig.from_env({"LLM_GUARD_TENANT_MAX_SESSIONS": "-2"})
    with pytest.raises(ConfigError, match="LLM_GUARD_TENANT_MAX_HELD_BYTES"):
        GuardConfig.from_env({"LLM_GUARD_TENANT_MAX_HELD_BYTES": "-1Gi"})
    with pytest.raises(ConfigError, match="LLM_GUARD_TENANT_HEADER"):
        GuardConfig.from_env({"LLM_GUARD_TENANT_HEADER": "x tenant"})
    with pytest.raises(ConfigError, match="LLM_GUARD_SHED_CEILING"):
        GuardConfig.from_env({"LLM_GUARD_SHED_CEILING": "0.9"})  # not above shed_at 0.92
    config = GuardConfig.defaults(tenant_priorities={"b": "LOW", "a=b": "high"})
    assert config.tenant_priorities == ("a=b=high", "b=low")


# -- the book --------------------------------------------------------------------------


def test_session_cap_accounting_on_open_and_close() -> None:
    registry = SessionRegistry(100, tenants=TenantBook(max_sessions=2))
    book = registry.tenants
    a1, a2 = registry.open("http", tenant="a"), registry.open("websocket", tenant="a")
    assert a1.tenant == "a" and a1.priority is Priority.NORMAL
    assert book.over_quota("a") and not book.over_quota("b")
    registry.start_closing(a1, CloseReason.EVICTED)
    assert book.over_quota("a"), "a closing session still holds its slot until forgotten"
    registry.forget(a1)
    registry.forget(a1)  # forgotten twice: counted once
    assert not book.over_quota("a")
    figures = book.figures("a")
    assert figures is not None and figures.sessions == 1
    registry.start_closing(a2, CloseReason.COMPLETED)
    registry.forget(a2)
    assert book.figures("a") is None and len(book) == 0


def test_held_bytes_cap_acts_on_the_last_refresh() -> None:
    registry = SessionRegistry(100, tenants=TenantBook(max_held_bytes=1000))
    book = registry.tenants
    session = registry.open("websocket", tenant="a")
    session.attached_bytes = 1500
    assert not book.over_quota("a")  # not refreshed yet
    book.refresh_held(registry)
    assert book.over_quota("a")
    session.attached_bytes = 10
    book.refresh_held(registry)
    assert not book.over_quota("a")


def test_status_cardinality_is_bounded_top_n_plus_other() -> None:
    registry = SessionRegistry(1000, tenants=TenantBook(top=3, max_tracked=50))
    book = registry.tenants
    for i in range(8):
        for _ in range(i + 1):
            registry.open("http", tenant=f"t{i}").attached_bytes = 10
    for i in range(200):  # hostile keys that are all refused: never more than 50 tracked
        book.refused(f"r{i}")
    assert len(book) == 50
    doc = book.section(registry)
    assert list(doc) == ["t7", "t6", "t5", "other"]
    assert doc["t7"] == {"sessions": 8, "held_bytes": 80, "refused_total": 0}
    assert doc["other"]["sessions"] == sum(range(1, 6))
    assert doc["other"]["held_bytes"] == 10 * sum(range(1, 6))
    assert doc["other"]["refused_total"] == 200
    assert doc["other"]["tenants"] == 47


def test_guard_status_sections_and_refusals_per_tenant() -> None:
    guard = make_guard(fake_source(), tenant_max_sessions=1, tenant_header="x-tenant")
    session = guard.registry.open("http", tenant="a", priority=Priority.LOW)
    assert guard.admit("a") == "tenant_quota"
    guard.record_shed("tenant_quota", "/chat", "a")
    guard.registry.open("http")  # no tenant: the default one
    status = guard.status(include_sessions=True)
    assert status["tenants"]["a"] == {"sessions": 1, "held_bytes": 0, "refused_total": 1}
    assert status["tenants"]["default"]["sessions"] == 1
    assert status["tenants"]["other"]["sessions"] == 0
    assert status["tenant_keys"] == {"source": "header", "default": "default",
                                     "errors_total": 0, "invalid_total": 0}
    assert status["actions"]["shed_by_reason"] == {"tenant_quota": 1}
    (listed,) = [s for s in status["session_list"] if s["id"] == session.id]
    assert listed["tenant"] == "a" and listed["priority"] == "low"


@pytest.mark.anyio
async def test_the_sampler_tick_refreshes_held_bytes_for_the_held_cap() -> None:
    guard = make_guard(fake_source(), tenant_max_held_bytes=1000)
    session = guard.registry.open("websocket", tenant="a")
    session.attached_bytes = 4000
    assert guard.admit("a") is None  # figures from before the tick
    await guard.tick()
    assert guard.admit("a") == "tenant_quota"
    assert guard.admit("b") is None
    session.attached_bytes = 0
    await guard.tick()
    assert guard.admit("a") is None
