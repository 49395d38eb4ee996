"""Settings of the circuit breakers, from keyword arguments or ``LLM_GUARD_BREAKER_*``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from llm_guard_sdk.settings import COUNT, POSITIVE, Rule, Settings

__all__ = ["BreakerSettings"]


@dataclass(frozen=True, slots=True)
class BreakerSettings(Settings):
    """How a breaker opens and recovers; one set shared by every breaker of a registry.

    Attributes:
        failures: Failures within ``window`` that open the breaker (``LLM_GUARD_BREAKER_FAILURES``).
        window: Seconds of the sliding window failures are counted in.
        open_for: Seconds an open breaker refuses before letting probes through.
        probes: Requests let through half-open; that many successes close the breaker.
    """

    ENV_PREFIX: ClassVar[str] = "LLM_GUARD_BREAKER_"
    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({
        "failures": Rule(COUNT, "expected an integer >= 1, e.g. 5"),
        "window": Rule(POSITIVE, "expected seconds > 0, e.g. 30"),
        "open_for": Rule(POSITIVE, "expected seconds > 0, e.g. 15"),
        "probes": Rule(COUNT, "expected an integer >= 1, e.g. 1"),
    })

    failures: int = 5
    window: float = 30.0
    open_for: float = 15.0
    probes: int = 1
