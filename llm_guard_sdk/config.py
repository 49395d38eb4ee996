"""Settings for the guard, from keyword arguments or ``LLM_GUARD_*`` environment variables.

Strict, as every settings class (see :mod:`llm_guard_sdk.settings`): a setting is checked once,
at start-up, whether it came from keyword arguments or the environment, and a failure names
the setting, the offending value and the accepted form.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from itertools import pairwise
from types import MappingProxyType
from typing import ClassVar

from llm_guard_sdk.checks import header_name, optional_count, tenant_key, tenant_priorities
from llm_guard_sdk.monitors.base import SOURCE_NAMES
from llm_guard_sdk.priority import PRIORITY_NAMES
from llm_guard_sdk.settings import (
    BOOL_FORM,
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    SIZE_FORM,
    Rule,
    Settings,
    choices,
    flag,
    limit,
    number,
    one_of,
    optional_size,
    parse_size,
    paths,
    route,
    size,
    token,
)

__all__ = ["DEFAULT_EXEMPT_PATHS", "GuardConfig", "parse_size"]

DEFAULT_EXEMPT_PATHS = ("/health*", "/ready*", "/livez", "/metrics")
"""Probes and scrapes are never guarded or shed (``*``: any path starting so; else the path
and its sub-paths). The guard's own ``route_prefix`` routes never are, whatever this says."""

_THRESHOLDS = ("warn_at", "evict_at", "shed_at")
MIN_MEMORY_LIMIT = 16 * 1024**2
"""Below this a limit is almost certainly a unit mistake (``512`` meaning 512 MiB)."""
MIN_SAMPLE_INTERVAL = 0.01
"""Below this the sampler would spend the event loop reading /proc and cgroup files."""

EXTENSION_VARS = frozenset({
    "LLM_GUARD_LEAK_GRACE", "LLM_GUARD_LOG_CONTENT",  # llm_guard_sdk.leaks: LeakSettings
    "LLM_GUARD_SNAPSHOT_MIN_INTERVAL",
    "LLM_GUARD_MAX_WAITING_REQUESTS",  # llm_guard_sdk.engines.vllm: VLLMSettings
    "LLM_GUARD_MAX_MESSAGE_BYTES", "LLM_GUARD_MAX_HISTORY_TOKENS",  # adapters.chat: ChatSettings
    "LLM_GUARD_CHAT_PING_INTERVAL", "LLM_GUARD_CHAT_PING_TIMEOUT",
    *(f"LLM_GUARD_QUOTA_{n}" for n in (  # llm_guard_sdk.quota: QuotaSettings
        "ADMISSION", "FILE", "RING_SIZE", "SESSION_SECONDS", "TARGET", "WINDOW")),
    "LLM_GUARD_ADAPTIVE_TIMEOUTS",  # llm_guard_sdk.actions.adaptive: AdaptiveTimeoutSettings
    *(f"LLM_GUARD_TIMEOUT_{n}" for n in (
        "JITTER", "MAX", "MAX_KEYS", "MIN", "MIN_SAMPLES", "P99_FACTOR", "WINDOW")),
    *(f"LLM_GUARD_BREAKER_{n}" for n in (  # llm_guard_sdk.breakers: BreakerSettings
        "FAILURES", "OPEN_FOR", "PROBES", "WINDOW")),
    "LLM_GUARD_DEGRADE_MIN_TOKENS",  # llm_guard_sdk.degrade: DegradeSettings
})
"""The extensions' variables, named here so the unknown-variable warning spares them without
the core importing any extension (each extension's settings class reads and checks them)."""


def memory_limit(value: object) -> int | None:
    """A size of at least 16 MiB, or None for None/empty (no configured limit)."""
    limit_bytes = optional_size(value)
    if limit_bytes is not None and limit_bytes < MIN_MEMORY_LIMIT:
        raise ValueError(value)
    return limit_bytes

_ON, _OFF = frozenset({"1", "true", "yes", "on"}), frozenset({"", "0", "false", "no", "off"})
DEGRADE_LEVELS = ("normal", "warn", "evict")


def degrade_level(value: object) -> str | None:
    """``LLM_GUARD_DEGRADE``: off (None), on (= ``warn``), or the lowest level that degrades."""
    if value is None or value is False:
        return None
    if value is True:
        return "warn"
    if not isinstance(value, str):
        raise TypeError(value)
    text = value.strip().lower()
    if text in _OFF:
        return None
    if text in _ON:
        return "warn"
    if text in DEGRADE_LEVELS:
        return text
    raise ValueError(value)


def auto_switch(value: object) -> bool | None:
    """``auto`` (None: on when the dependency imports), on (True) or off (False)."""
    if value is None or isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise TypeError(value)
    text = value.strip().lower()
    if text in ("auto", ""):
        return None
    if text in _ON:
        return True
    if text in _OFF:
        return False
    raise ValueError(value)


_NO_LIMIT = "expected seconds > 0, or 0/empty for no limit, e.g. "
# ``{warn_at}``-style placeholders become the name the user actually wrote (field name or env
# var) when the message is rendered.
_RULES: Mapping[str, Rule] = MappingProxyType({
    "memory_limit": Rule(memory_limit, f"expected {SIZE_FORM}, at least 16Mi, e.g. 512Mi or "
                         "2Gi (a plain number is bytes)", text=True),
    "warn_at": Rule(FRACTION, "expected a fraction in (0, 1], e.g. 0.75"),
    "evict_at": Rule(FRACTION, "expected a fraction in (0, 1], e.g. 0.85"),
    "shed_at": Rule(FRACTION, "expected a fraction in (0, 1], e.g. 0.92"),
    "hysteresis": Rule(NON_NEGATIVE, "expected a fraction >= 0 and below {warn_at}, e.g. 0.05"),
    "sample_interval": Rule(number(lambda x: x >= MIN_SAMPLE_INTERVAL),
                            "expected seconds >= 0.01, e.g. 0.25"),
    "idle_timeout": Rule(POSITIVE, "expected seconds > 0, e.g. 300"),
    "idle_timeout_level": Rule(one_of(("normal", "warn", "evict", "shed")), "expected the lowest "
                               "level that closes idle sessions: normal (always), warn, evict or "
                               "shed, e.g. warn", text=True),
    "min_session_age": Rule(NON_NEGATIVE, "expected seconds >= 0, e.g. 30"),
    "max_sessions": Rule(COUNT, "expected an integer >= 1, e.g. 10000"),
    "status_token": Rule(token, "expected >= 8 printable ASCII characters without spaces",
                         secret=True),
    "retry_after": Rule(number(lambda x: x >= 0, integer=True),
                        "expected whole seconds >= 0, e.g. 5"),
    "chunk_timeout": Rule(limit, _NO_LIMIT + "30"),
    "stream_timeout": Rule(limit, _NO_LIMIT + "600"),
    "max_evictions_per_tick": Rule(COUNT, "expected an integer >= 1, e.g. 50"),
    "snapshot_ring_size": Rule(COUNT, "expected an integer >= 1, e.g. 32"),
    "sources": Rule(choices(SOURCE_NAMES), "expected distinct comma-separated items out of "
                    f"{', '.join(SOURCE_NAMES)}, e.g. process,cgroup"),
    "route_prefix": Rule(route, "expected a path starting but not ending with '/', of "
                         "A-Z a-z 0-9 . _ ~ / -, e.g. /llm-guard"),
    "exempt_paths": Rule(paths, "expected comma-separated path prefixes, each starting but not "
                         "ending with '/', optionally ending with '*', e.g. /health*,/metrics"),
    "trim_heap": Rule(flag, BOOL_FORM),
    "size_budget_ms": Rule(POSITIVE, "expected milliseconds > 0, e.g. 2.0"),
    "admission_projection": Rule(flag, BOOL_FORM),
    "projection_window": Rule(COUNT, "expected an integer >= 1, e.g. 32"),
    "close_grace": Rule(NON_NEGATIVE, "expected seconds >= 0, e.g. 2"),
    "send_timeout": Rule(limit, _NO_LIMIT + "30"),
    "max_inbound_buffer": Rule(size, f"expected {SIZE_FORM}, e.g. 1MiB", text=True),
    "leaks": Rule(flag, BOOL_FORM),
    "adaptive_timeouts": Rule(flag, BOOL_FORM),
    "breakers": Rule(flag, BOOL_FORM),
    "quota": Rule(flag, BOOL_FORM),
    "dashboard": Rule(flag, BOOL_FORM),
    "degrade": Rule(degrade_level, "expected off, on (= warn) or the lowest level that degrades "
                    "engine requests: normal, warn or evict, e.g. warn", text=True),
    "metrics": Rule(auto_switch, "expected auto (on when prometheus-client is installed), 1 or "
                    "0, e.g. auto", text=True),
    "shed_ceiling": Rule(number(lambda x: 0 < x <= 1, none=True), "expected a fraction in "
                         "(0, 1] above {shed_at}, e.g. 0.98, or empty for halfway to 1"),
    # Tenants and priorities (llm_guard_sdk.tenants, docs/tenants.md).
    "tenant_header": Rule(header_name, "expected a header name (letters, digits, -), e.g. "
                          "x-tenant-id, or empty for no tenant header", text=True),
    "tenant_default": Rule(tenant_key, "expected 1-64 printable ASCII characters without "
                           "spaces, e.g. default", text=True),
    "tenant_max_sessions": Rule(optional_count, "expected an integer >= 1, or 0/empty for no "
                                "cap, e.g. 100"),
    "tenant_max_held_bytes": Rule(optional_size, f"expected {SIZE_FORM}, e.g. 2Gi, or empty "
                                  "for no cap", text=True),
    "tenant_priorities": Rule(tenant_priorities(PRIORITY_NAMES), "expected comma-separated "
                              f"tenant=class pairs, each class one of {', '.join(PRIORITY_NAMES)}"
                              ", each tenant once, e.g. tenantA=high,tenantB=low", text=True),
    "priority_header": Rule(header_name, "expected a header name (letters, digits, -), e.g. "
                            "x-priority, or empty for none", text=True),
    "tenant_status_top": Rule(COUNT, "expected an integer >= 1, e.g. 10"),
})


@dataclass(frozen=True, slots=True)
class GuardConfig(Settings):
    """The core guard settings, validated on construction so a bad deploy fails before traffic.

    ``GuardConfig(**kwargs)`` reads ``LLM_GUARD_*`` for the fields not given (keyword arguments
    over the environment over the defaults); ``GuardConfig.from_env(environ)`` reads a given
    mapping; ``GuardConfig.defaults(**kwargs)`` ignores the environment (tests). All run the
    same checks. Thresholds are fractions of the memory limit. ``memory_limit`` also takes
    size strings ("512Mi", "2G"), ``sources`` a list or a comma-separated string; they are
    stored as int and tuple. Extensions keep their own settings (``LeakSettings``,
    ``VLLMSettings``, ``ChatSettings``).
    """

    RULES: ClassVar[Mapping[str, Rule]] = _RULES
    ENV_NAME_EXCEPTIONS: ClassVar[Mapping[str, str]] = MappingProxyType(
        {"snapshot_ring_size": "LLM_GUARD_SNAPSHOT_RING"})
    # Read by other parts of the SDK (demo apps, tiny-model cache, test engines, test suite):
    # not guard settings, but they must not trip the unknown-variable check.
    SIBLING_VARS: ClassVar[frozenset[str]] = EXTENSION_VARS
    FOREIGN_VARS: ClassVar[frozenset[str]] = frozenset(
        {"LLM_GUARD_CACHE_DIR", "LLM_GUARD_ENGINE_TMPDIR"})
    FOREIGN_PREFIXES: ClassVar[tuple[str, ...]] = ("LLM_GUARD_DEMO_", "LLM_GUARD_TEST_")

    memory_limit: int | None = None
    warn_at: float = 0.75
    evict_at: float = 0.85
    shed_at: float = 0.92
    hysteresis: float = 0.05
    sample_interval: float = 0.25
    idle_timeout: float = 300.0
    idle_timeout_level: str = "warn"
    min_session_age: float = 30.0
    max_sessions: int = 10000
    status_token: str | None = field(default=None, repr=False)  # keep it out of logs
    retry_after: int = 5
    chunk_timeout: float | None = None
    stream_timeout: float | None = None
    max_evictions_per_tick: int = 50
    snapshot_ring_size: int = 32
    sources: tuple[str, ...] = SOURCE_NAMES
    route_prefix: str = "/llm-guard"
    exempt_paths: tuple[str, ...] = DEFAULT_EXEMPT_PATHS
    trim_heap: bool = True
    size_budget_ms: float = 2.0
    # Admission counts what sessions admitted since the last sample will take (projection.py):
    admission_projection: bool = True
    projection_window: int = 32  # measured sessions whose largest is a new one's expected size
    close_grace: float = 2.0
    send_timeout: float | None = 30.0  # a send stuck this long: the peer is dead (0/None: off)
    max_inbound_buffer: int = 1048576  # unread WebSocket frames held per connection (then 1009)
    # Switches of the built-in extensions, so the core loads them by name (extensions.py):
    leaks: bool = False  # "leaks"
    adaptive_timeouts: bool = False  # "timeouts"; AdaptiveTimeoutSettings reads it too
    breakers: bool = False  # "breakers"
    quota: bool = False  # "quota"
    degrade: str | None = None  # "degrade": the lowest level that degrades, None: off
    metrics: bool | None = None  # "metrics": None = auto (on when prometheus_client imports)
    dashboard: bool = True  # "dashboard": /llm-guard/dashboard (same auth as status)
    shed_ceiling: float | None = None  # high priority is refused only from here
    tenant_header: str | None = None
    tenant_default: str = "default"
    tenant_max_sessions: int | None = None
    tenant_max_held_bytes: int | None = None
    tenant_priorities: tuple[str, ...] = ()  # "tenant=class" items
    priority_header: str | None = None
    tenant_status_top: int = 10

    def validate(self) -> None:
        """Thresholds increase strictly, hysteresis stays below warn, the ceiling above shed."""
        self._check_order()
        if self.hysteresis >= self.warn_at:
            accepted = f"expected a fraction >= 0 and below {{warn_at}} ({self.warn_at}), e.g. 0.05"
            raise self.field_error("hysteresis", self.hysteresis, accepted)
        if self.shed_ceiling is not None and self.shed_ceiling <= self.shed_at:
            accepted = f"expected a fraction in (0, 1] above {{shed_at}} ({self.shed_at})"
            raise self.field_error("shed_ceiling", self.shed_ceiling, accepted)

    @property
    def effective_shed_ceiling(self) -> float:
        """Pressure that refuses even high priority: ``shed_ceiling``, or halfway to 1."""
        return self.shed_ceiling if self.shed_ceiling is not None else (1 + self.shed_at) / 2

    def _check_order(self) -> None:
        """Reject thresholds that do not increase strictly, blaming the likely culprit."""
        values = {name: getattr(self, name) for name in _THRESHOLDS}
        defaults = {f.name: f.default for f in fields(self)}
        for low, high in pairwise(_THRESHOLDS):
            if values[low] < values[high]:
                continue
            # Blame the one the user changed; when both changed, the higher one.
            only_low = values[low] != defaults[low] and values[high] == defaults[high]
            blamed = low if only_low else high
            order = " < ".join(f"{{{name}}} ({value})" for name, value in values.items())
            accepted = f"thresholds must increase strictly: {order}, each in (0, 1]"
            raise self.field_error(blamed, values[blamed], accepted)
