"""``llm-guard config``: the effective settings, where each came from, and the memory limit.

::

    llm-guard config                      # this environment: what a guard started here would use
    llm-guard config --url http://...     # the running guard's (GET <prefix>/config)
    llm-guard config --json

Locally the settings are built from ``LLM_GUARD_*`` exactly as a guard builds them (the core
``GuardConfig`` and each extension's settings class), so an invalid variable stops this command
with exit 2 and the same one line that would stop the server. Origins are ``default`` or
``environment`` here; a running guard also reports ``code`` (keyword arguments in the app).
Secrets (the status token) are hidden either way.
"""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import Mapping
from typing import Any

from llm_guard_sdk.cli_common import (
    EXIT_OK,
    EXIT_SERVER_ERROR,
    EXIT_USAGE,
    CommandError,
    endpoint,
)
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.config_report import config_report
from llm_guard_sdk.doctor.from_url import fetch_guard
from llm_guard_sdk.doctor.model import size_text
from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.monitors.build import find_limit
from llm_guard_sdk.settings import Settings

EXTENSION_SETTINGS: Mapping[str, str] = {
    "leaks": "llm_guard_sdk.leaks.settings:LeakSettings",
    "timeouts": "llm_guard_sdk.actions.adaptive:AdaptiveTimeoutSettings",
    "breakers": "llm_guard_sdk.breakers.settings:BreakerSettings",
    "quota": "llm_guard_sdk.quota.settings:QuotaSettings",
    "degrade": "llm_guard_sdk.degrade.degrader:DegradeSettings",
    "vllm": "llm_guard_sdk.engines.vllm.settings:VLLMSettings",
    "chat": "llm_guard_sdk.adapters.chat:ChatSettings",
}
"""Extension name -> its settings class, imported only by this command."""


def add_config_command(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``config`` on the ``llm-guard`` subparsers."""
    config = sub.add_parser(
        "config", parents=[common],
        help="effective settings, where each came from, and the memory limit",
        description="Without --url: the settings a guard started in this environment would "
                    "use. With --url: the running guard's (GET <prefix>/config). Exit 2 when "
                    "a setting is invalid, naming it.")
    config.add_argument("--timeout", type=float, default=10.0,
                        help="seconds to wait for the server (10)")
    config.add_argument("--json", action="store_true", help="print the report as JSON")
    config.set_defaults(func=cmd_config)


def _settings_class(target: str) -> type[Settings] | None:
    module_name, _, attribute = target.partition(":")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except ImportError:
        return None  # an extension whose optional dependencies are missing
    return found if isinstance(found, type) and issubclass(found, Settings) else None


def local_report(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a guard started with ``environ`` (``os.environ``) would use."""
    try:
        config = GuardConfig.from_env(environ)
        extensions: dict[str, Settings] = {}
        for name, target in EXTENSION_SETTINGS.items():
            cls = _settings_class(target)
            if cls is not None:
                extensions[name] = cls.from_env(environ)
    except ConfigError as exc:
        raise CommandError(f"invalid setting: {exc}", code=EXIT_USAGE) from None
    limit, origin = find_limit(config.memory_limit)
    return config_report(config, limit_bytes=limit, limit_source=origin,
                         extensions=extensions, where="local environment")


def remote_report(url: str, token: str | None, timeout: float) -> dict[str, Any]:
    """The running guard's report; an HTTP error exits 1 as for ``status``, with its hint."""
    try:
        doc = fetch_guard(url, token, timeout)
    except CommandError as exc:
        code = EXIT_SERVER_ERROR if exc.http_status is not None else EXIT_USAGE
        raise CommandError(str(exc), code=code) from None
    if not (isinstance(doc, dict) and isinstance(doc.get("settings"), dict)):
        raise CommandError(f"{url}: the answer is not a guard's config document",
                           code=EXIT_USAGE)
    return doc


def _value(value: object) -> str:
    if isinstance(value, list):
        return ",".join(str(item) for item in value) or "-"
    return "-" if value is None else str(value)


def format_report(doc: dict[str, Any]) -> str:
    """The report as aligned text: one line per setting (value, origin, variable)."""
    limit = doc.get("memory_limit", {})
    source = limit.get("source") or "none known"
    lines = [f"llm-guard config ({doc.get('where')})",
             f"memory limit   {size_text(limit.get('bytes'))} from {source}", ""]
    sections = [("core", doc.get("settings", {})), *sorted(doc.get("extensions", {}).items())]
    for title, entries in sections:
        lines.append(f"[{title}]")
        for name, entry in entries.items():
            lines.append(f"  {name:<24} {_value(entry.get('value')):<28} "
                         f"{entry.get('origin', '?'):<12} {entry.get('env', '')}")
    return "\n".join(lines)


def cmd_config(args: argparse.Namespace) -> int:
    """Print the local or the running guard's configuration."""
    if getattr(args, "url_given", True):
        doc = remote_report(endpoint(args.url, args.prefix, "/config"), args.token, args.timeout)
    else:
        doc = local_report()
    print(json.dumps(doc, indent=2) if args.json else format_report(doc))
    return EXIT_OK
