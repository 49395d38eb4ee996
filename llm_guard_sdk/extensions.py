"""Extensions: optional parts (leak sweeper, engine integrations) that plug into a guard.

An extension has a ``name`` and a ``setup(guard)`` that registers what it needs through the
guard's public extension points (``add_source``, ``add_close_hook``, ``add_tick_hook``,
``add_status_section``, ``add_control_route``, ...). Built-in extensions are enabled by name, as
sentry-python enables integrations: the name maps to an import string resolved only when the
extension is enabled, so the core never imports an extension module and an extension's optional
dependencies are only needed by those who enable it.

This module sits below the guard (the guard resolves names through it), so ``setup`` takes the
guard untyped here; implementations annotate it as ``Guard``.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from llm_guard_sdk.errors import ConfigError

BUILTIN_EXTENSIONS: Mapping[str, str] = MappingProxyType({
    "leaks": "llm_guard_sdk.leaks:LeakExtension",  # LLM_GUARD_LEAK_*
    "timeouts": "llm_guard_sdk.actions.adaptive:AdaptiveTimeouts",  # LLM_GUARD_TIMEOUT_*
    "breakers": "llm_guard_sdk.breakers:Breakers",  # LLM_GUARD_BREAKER_*
    "quota": "llm_guard_sdk.quota:QuotaRecorder",  # LLM_GUARD_QUOTA_*
    "degrade": "llm_guard_sdk.degrade:Degrader",  # LLM_GUARD_DEGRADE_*
    "metrics": "llm_guard_sdk.metrics:GuardMetrics",  # LLM_GUARD_METRICS
    "dashboard": "llm_guard_sdk.dashboard:Dashboard",  # LLM_GUARD_DASHBOARD (default on)
})
"""Extension name -> ``"module:attribute"`` of a class built with no arguments."""

SWITCHES: Mapping[str, str] = MappingProxyType({
    "leaks": "leaks",  # LLM_GUARD_LEAKS=1
    "timeouts": "adaptive_timeouts",  # LLM_GUARD_ADAPTIVE_TIMEOUTS=1
    "breakers": "breakers",  # LLM_GUARD_BREAKERS=1
    "quota": "quota",  # LLM_GUARD_QUOTA=1
    "degrade": "degrade",  # LLM_GUARD_DEGRADE=warn (or 1, evict, normal)
    "metrics": "metrics",  # LLM_GUARD_METRICS=auto (default), 1 or 0
    "dashboard": "dashboard",  # LLM_GUARD_DASHBOARD=0 turns the default-on dashboard off
})
"""Built-in extension name -> the ``GuardConfig`` field that enables it.

The switches are core settings, not the extensions' own: the guard must know which extensions
to load before importing them, and ``GuardConfig.defaults()`` (tests) must load none of them
whatever the environment says, except those on by default: the dashboard (it costs one
history point per second until a browser listens) and those of :data:`AUTO_SWITCHES`, by their
default."""


AUTO_SWITCHES: Mapping[str, str] = MappingProxyType({
    "metrics": "prometheus_client",
})
"""Extensions on by default: their switch left at ``auto`` (None) turns them on when this module
can be found (looked up, not imported), so an install without the extra runs without them."""


@runtime_checkable
class Extension(Protocol):
    """What ``Guard(extensions=...)`` and ``guard.add_extension`` accept."""

    @property
    def name(self) -> str:
        """Stable name; a guard keeps one extension per name (``guard.extension(name)``)."""
        ...

    def setup(self, guard: Any) -> None:
        """Register with ``guard``'s extension points; called once per guard."""
        ...


def load_extension(name: str) -> Extension:
    """Build the extension registered as ``name``, or one given as ``"module:Class"``.

    Raises:
        ConfigError: The name is unknown or does not lead to an extension.
    """
    target = BUILTIN_EXTENSIONS.get(name, name if ":" in name else None)
    if target is None:
        raise ConfigError(f"unknown extension {name!r}; built-in extensions are: "
                          f"{', '.join(sorted(BUILTIN_EXTENSIONS))} (or give 'module:Class')")
    module_name, _, attribute = target.partition(":")
    factory = getattr(importlib.import_module(module_name), attribute, None)
    extension = factory() if callable(factory) else None
    if not isinstance(extension, Extension):
        raise ConfigError(f"extension {name!r} ({target}) is not an extension: it needs a "
                          "'name' and a 'setup(guard)' method")
    return extension


def configured_extensions(config: object) -> list[str]:
    """Names of the built-in extensions ``config`` (a ``GuardConfig``) switches on, in order."""
    return [name for name, field in SWITCHES.items()
            if _switched_on(name, getattr(config, field, None))]


def _switched_on(name: str, value: object) -> bool:
    """A switch's value, with ``auto`` (None) resolved for the extensions on by default."""
    if value is None and name in AUTO_SWITCHES:
        return importlib.util.find_spec(AUTO_SWITCHES[name]) is not None
    return bool(value)
