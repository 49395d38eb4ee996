"""The ``"breakers"`` extension: one circuit breaker per backend name, in status.

Engines look their breaker up by backend name (``Breakers.of(guard).get("vllm")``) and call
``allow()`` / ``record_success()`` / ``record_failure(kind)``, or wrap the call in
``async with breaker.guarded():``. The registry only creates, keeps and reports them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from llm_guard_sdk.breakers.breaker import CircuitBreaker, Clock
from llm_guard_sdk.breakers.settings import BreakerSettings

__all__ = ["Breakers"]


class Breakers:
    """Breakers by backend name; the guard extension named ``"breakers"``.

    Args:
        settings: Shared by every breaker it creates; :meth:`BreakerSettings.from_env` if None.
        clock: Given to every breaker it creates (tests pass a fake one).
    """

    name = "breakers"

    def __init__(self, settings: BreakerSettings | None = None, *,
                 clock: Clock = time.monotonic) -> None:
        self.settings = settings if settings is not None else BreakerSettings.from_env()
        self.clock = clock
        self._breakers: dict[str, CircuitBreaker] = {}

    @classmethod
    def of(cls, guard: Any) -> Breakers:
        """The guard's breakers, set up with settings from the environment on first use."""
        found = guard.add_extension(cls.name)
        if not isinstance(found, Breakers):
            raise TypeError(f"the guard's {cls.name!r} extension is a {type(found).__name__}")
        return found

    def setup(self, guard: Any) -> None:
        """Serve the ``breakers`` status section."""
        guard.add_status_section("breakers", self.status)

    def get(self, backend: str) -> CircuitBreaker:
        """The breaker of ``backend``, created closed on first use."""
        breaker = self._breakers.get(backend)
        if breaker is None:
            breaker = self._breakers[backend] = CircuitBreaker(
                backend, self.settings, clock=self.clock)
        return breaker

    def add(self, breaker: CircuitBreaker) -> CircuitBreaker:
        """Keep a breaker built elsewhere (own settings or classifier); its name must be new."""
        if breaker.name in self._breakers:
            raise ValueError(f"a breaker named {breaker.name!r} exists already")
        self._breakers[breaker.name] = breaker
        return breaker

    def __iter__(self) -> Iterator[CircuitBreaker]:
        return iter(list(self._breakers.values()))

    def __len__(self) -> int:
        return len(self._breakers)

    def __contains__(self, backend: object) -> bool:
        return backend in self._breakers

    def status(self) -> dict[str, Any]:
        """The ``breakers`` status section: each backend's state, failures in window, totals."""
        return {name: breaker.status() for name, breaker in self._breakers.items()}
