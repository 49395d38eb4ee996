"""The remote engine's one dependency, httpx, checked before anything imports it."""

from __future__ import annotations

import importlib.util

from llm_guard_sdk.errors import MissingDependencyError


def require_httpx() -> None:
    """Raise :class:`MissingDependencyError` (``pip install 'llm-guard-sdk[remote]'``)."""
    if importlib.util.find_spec("httpx") is None:
        raise MissingDependencyError("httpx (the remote engine's HTTP client)", "remote")
