"""The effective settings, where each came from, and the memory limit: one JSON document.

Served by a running guard at ``GET /llm-guard/config`` (access "status", like the status
document) and built locally by ``llm-guard config`` from the environment, so both print the
same shape. Secrets are hidden (``Settings.describe``): the report says a token is set, never
what it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llm_guard_sdk.hooks import ControlResult, ExtensionPoints
from llm_guard_sdk.settings import Settings

__all__ = ["add_config_route", "config_report", "running_settings", "settings_entries"]


def settings_entries(settings: Settings) -> dict[str, dict[str, Any]]:
    """Per field: the value (secrets hidden), its origin and the variable that sets it."""
    values = settings.describe()
    origins = settings.provenance()
    env = settings.env_names()
    return {name: {"value": value, "origin": origins[name], "env": env[name]}
            for name, value in values.items()}


def running_settings(extensions: Mapping[str, Any]) -> dict[str, Settings]:
    """The settings of a guard's extensions, by extension name, for those that keep one.

    An extension that exposes its settings as a public ``settings`` attribute (leaks, quota,
    breakers, degrade, adaptive timeouts, vLLM) is reported; others have none to report.
    """
    found: dict[str, Settings] = {}
    for name, extension in extensions.items():
        settings = getattr(extension, "settings", None)
        if isinstance(settings, Settings):
            found[name] = settings
    return found


def config_report(config: Settings, *, limit_bytes: int | None, limit_source: str,
                  extensions: Mapping[str, Settings], where: str) -> dict[str, Any]:
    """The report: core settings, each extension's, and the effective memory limit.

    Args:
        config: The core settings (a ``GuardConfig``).
        limit_bytes: The effective limit the monitors judge against (None: none known).
        limit_source: ``configured``, ``cgroup``, ``host`` or ``""``.
        extensions: Extension settings by name.
        where: ``running guard`` or ``local environment``: what the report describes.
    """
    return {
        "where": where,
        "memory_limit": {"bytes": limit_bytes, "source": limit_source or None},
        "settings": settings_entries(config),
        "extensions": {name: settings_entries(s) for name, s in sorted(extensions.items())},
    }


def add_config_route(guard: ExtensionPoints, config: Settings) -> None:
    """Serve the running guard's report at ``<prefix>/config`` (the status route's access)."""
    def serve(query: dict[str, list[str]]) -> ControlResult:
        return 200, config_report(config, limit_bytes=guard.sampler.limit_bytes,
                                  limit_source=guard.sampler.limit_source,
                                  extensions=running_settings(guard.extensions),
                                  where="running guard")

    guard.add_control_route("/config", serve, access="status")
