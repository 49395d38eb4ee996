"""Tenants and priorities: who a connection belongs to, per-tenant caps, and priority classes.

* :mod:`.keys` — :class:`TenantResolver`: the tenant and class of a new connection (header or a
  callable on the scope), hostile values and failures mapped to the default tenant.
* :mod:`.book` — :class:`TenantBook`: sessions, held bytes and refusals per tenant; the caps
  (429 ``tenant_quota``); the bounded ``tenants`` status section.
* :class:`Tenants` — both, built from :class:`~llm_guard_sdk.config.GuardConfig`, as the guard
  holds them. The priority classes themselves are :class:`~llm_guard_sdk.priority.Priority`;
  the registry indexes sessions per class and the evictor and admission read it.

See docs/tenants.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.session import Session
from llm_guard_sdk.tenants.book import OTHER, TenantBook, TenantFigures
from llm_guard_sdk.tenants.keys import TenantKeyFunction, TenantResolver

__all__ = ["OTHER", "TenantBook", "TenantFigures", "TenantKeyFunction", "TenantResolver",
           "Tenants"]


def _pairs(items: tuple[str, ...]) -> dict[str, str]:
    """``("a=high", ...)`` (as the setting stores them) -> ``{"a": "high"}``."""
    return {tenant: name for tenant, _, name in (item.rpartition("=") for item in items)}


class Tenants:
    """The guard's tenant resolver and book, from the settings.

    Args:
        config: ``tenant_*`` and ``priority_header`` settings.
        key_function: ``fn(scope) -> tenant or None``, used instead of ``tenant_header``.
    """

    def __init__(self, config: GuardConfig, key_function: TenantKeyFunction | None = None) -> None:
        self.resolver = TenantResolver(
            header=config.tenant_header, key_function=key_function,
            default=config.tenant_default, priorities=_pairs(config.tenant_priorities),
            priority_header=config.priority_header)
        self.book = TenantBook(max_sessions=config.tenant_max_sessions,
                               max_held_bytes=config.tenant_max_held_bytes,
                               top=config.tenant_status_top)

    def resolve(self, scope: Any) -> tuple[str, Priority]:
        """The connection's tenant and priority class; never raises."""
        return self.resolver.resolve(scope)

    def tick_hook(self, sessions: Callable[[], Iterable[Session]]) -> Callable[[Any], None]:
        """A sampler tick hook refreshing held bytes per tenant, when a held-bytes cap is set."""

        def refresh(_: Any) -> None:
            if self.book.max_held_bytes is not None:
                self.book.refresh_held(sessions())

        return refresh
