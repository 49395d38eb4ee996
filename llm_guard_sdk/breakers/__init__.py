"""Circuit breakers for model backends (the ``"breakers"`` extension).

:class:`CircuitBreaker` is the state machine of one backend, :class:`Breakers` keeps one per
backend name and reports them in the ``breakers`` status section, :class:`BreakerSettings`
reads ``LLM_GUARD_BREAKER_*``. See ``docs/adaptive.md``.
"""

from llm_guard_sdk.breakers.breaker import (
    BreakerOpenError,
    BreakerState,
    CircuitBreaker,
    classify_failure,
)
from llm_guard_sdk.breakers.registry import Breakers
from llm_guard_sdk.breakers.settings import BreakerSettings

__all__ = [
    "BreakerOpenError",
    "BreakerSettings",
    "BreakerState",
    "Breakers",
    "CircuitBreaker",
    "classify_failure",
]
