"""Which tenant and priority class a new connection belongs to, read once at admission.

The key comes from a callable on the ASGI scope given in code (``tenant_key=``), else from the
header ``LLM_GUARD_TENANT_HEADER``, else every connection is the default tenant. Nothing here
raises into the app: a missing header, a hostile value (over 64 bytes, control characters,
spaces, non-ASCII) or a callable's wrong answer maps to the default tenant and is counted as
invalid; a callable that raises maps to the default and is counted as an error.

The class comes from the header ``LLM_GUARD_PRIORITY_HEADER`` when it names a class (set it at a
trusted gateway: a client that can set it can raise its own priority), else from the tenant's
entry in ``LLM_GUARD_TENANT_PRIORITIES``, else ``normal``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from llm_guard_sdk.checks import is_tenant_key
from llm_guard_sdk.priority import PRIORITY_NAMES, Priority, parse_priority
from llm_guard_sdk.ratelog import RateLimitedLog

logger = logging.getLogger("llm_guard_sdk")

TenantKeyFunction = Callable[[Any], str | None]
"""``fn(scope) -> tenant or None`` (None: the default tenant); sync, called per connection."""
_PRIORITY_VALUES = {name.encode(): Priority[name.upper()] for name in PRIORITY_NAMES}


class TenantResolver:
    """Maps an ASGI scope to ``(tenant, priority)``; never raises.

    Args:
        header: Lower-case header carrying the tenant key, or None.
        key_function: Called with the scope instead of reading ``header``.
        default: The tenant of connections without a valid key.
        priorities: Tenant -> class name (``LLM_GUARD_TENANT_PRIORITIES``).
        priority_header: Lower-case header naming the class, or None.
    """

    def __init__(self, *, header: str | None = None,
                 key_function: TenantKeyFunction | None = None, default: str = "default",
                 priorities: Mapping[str, str] | None = None,
                 priority_header: str | None = None) -> None:
        self.header = header.encode("latin-1") if header else None
        self.key_function = key_function
        self.default = default
        self.priorities: Mapping[str, Priority] = MappingProxyType(
            {tenant: parse_priority(name) for tenant, name in (priorities or {}).items()})
        self.priority_header = priority_header.encode("latin-1") if priority_header else None
        self.errors_total = 0
        """The key function raised (the connection went to the default tenant)."""
        self.invalid_total = 0
        """A key was present but not acceptable (the connection went to the default tenant)."""
        self._error_log = RateLimitedLog(logger, "tenant key function errors", interval=60.0)

    @property
    def enabled(self) -> bool:
        """Whether connections can be told apart at all (a key function or a header)."""
        return self.key_function is not None or self.header is not None

    @property
    def source(self) -> str:
        """Where keys come from, for status: ``function``, ``header`` or ``none``."""
        if self.key_function is not None:
            return "function"
        return "header" if self.header is not None else "none"

    def resolve(self, scope: Any) -> tuple[str, Priority]:
        """The connection's tenant and priority class. O(headers), no allocation on a miss."""
        tenant = self._tenant(scope)
        priority = self.priorities.get(tenant, Priority.NORMAL)
        if self.priority_header is not None:
            value = _header(scope, self.priority_header)
            if value is not None:
                priority = _PRIORITY_VALUES.get(bytes(value).lower(), priority)
        return tenant, priority

    def _tenant(self, scope: Any) -> str:
        if self.key_function is not None:
            try:
                key = self.key_function(scope)
            except Exception as exc:  # the app's function: count it, never raise into the app
                self.errors_total += 1
                self._error_log.event(type(exc).__name__, "llm-guard: the tenant key function "
                                      "raised %s; using tenant %r", type(exc).__name__,
                                      self.default)
                return self.default
            if key is None:
                return self.default
            if isinstance(key, str) and is_tenant_key(key):
                return key
            self.invalid_total += 1
            return self.default
        if self.header is None:
            return self.default
        value = _header(scope, self.header)
        if value is None:
            return self.default
        if is_tenant_key(value):
            return bytes(value).decode("ascii")
        self.invalid_total += 1
        return self.default

    def describe(self) -> dict[str, Any]:
        """Counters for status (the ``tenant_keys`` section)."""
        return {"source": self.source, "default": self.default,
                "errors_total": self.errors_total, "invalid_total": self.invalid_total}


def _header(scope: Any, name: bytes) -> bytes | None:
    """The first value of header ``name`` (ASGI gives lower-case names), or None."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return value  # type: ignore[no-any-return]
    return None
