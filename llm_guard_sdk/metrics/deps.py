"""prometheus-client, the ``prometheus`` extra: imported here first, or a clear start-up error.

Only this package imports prometheus-client, so ``import llm_guard_sdk`` works without it. The
core switches the extension on by default only when the module can be found
(``LLM_GUARD_METRICS=auto``); ``LLM_GUARD_METRICS=1`` without it stops start-up with
:class:`MetricsDependencyError`, a :class:`~llm_guard_sdk.errors.ConfigError` too, so the
middleware fails the lifespan startup with its message (uvicorn then refuses to start).
"""

from __future__ import annotations

from llm_guard_sdk.errors import ConfigError, MissingDependencyError

__all__ = ["MetricsDependencyError", "require_prometheus"]


class MetricsDependencyError(MissingDependencyError, ConfigError):
    """``LLM_GUARD_METRICS=1`` (or the ``metrics`` extension) without prometheus-client."""

    def __init__(self) -> None:
        super().__init__("prometheus-client (needed by LLM_GUARD_METRICS=1, the Prometheus "
                         "metrics)", "prometheus")
        self.args = (f"{self.args[0]}; or set LLM_GUARD_METRICS=0 (or auto) to run without "
                     "metrics",)


def require_prometheus() -> None:
    """Import prometheus-client, or raise :class:`MetricsDependencyError`."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise MetricsDependencyError() from None
