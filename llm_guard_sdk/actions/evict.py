"""Eviction: close sessions to bring memory back under the evict threshold, and idle timeouts.

Victims come from the registry's indexes, never from a scan, one priority class at a time,
lowest first: within a class idle sessions first (LRU, sparing young ones), then the streaming
sessions holding the most; so low-priority idle sessions, then low-priority streams, go before
any normal one, and high-priority sessions last. The evictor stops once the held bytes
of its victims (:attr:`Session.held_bytes`: what closing them is expected to free, never the
traffic they moved) would bring pressure down to the target, or after ``max_per_tick``; the next
sample measures what was really freed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from llm_guard_sdk.monitors.base import Reading
from llm_guard_sdk.policy import highest_pressure
from llm_guard_sdk.priority import Priority
from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import CloseReason, Session

CloseSession = Callable[[Session, CloseReason], Awaitable[None]]
"""The guard's close sequence (``Guard.close_session``)."""


class Evictor:
    """Chooses and closes victims.

    Args:
        registry: Where victims come from.
        close: Closes one session (the guard's close sequence).
        max_per_tick: Most sessions closed by one :meth:`evict`.
        min_session_age: Idle sessions younger than this (seconds) are spared.
        idle_timeout: Idle sessions past this (seconds) are closed by :meth:`close_idle` (the
            guard runs it from ``idle_timeout_level`` up).
    """

    def __init__(self, registry: SessionRegistry, close: CloseSession, *, max_per_tick: int,
                 min_session_age: float, idle_timeout: float) -> None:
        self.registry = registry
        self.close = close
        self.max_per_tick = max_per_tick
        self.min_session_age = min_session_age
        self.idle_timeout = idle_timeout
        self.expected_free_bytes = 0
        """Held bytes of the last :meth:`evict`'s victims: what it expected to free."""

    def choose(self, need: float) -> list[Session]:
        """Victims whose held bytes cover ``need``, within the per-tick budget, low class first."""
        victims: list[Session] = []
        for priority in Priority:
            if len(victims) >= self.max_per_tick or need <= 0:
                break
            need -= self._choose_in(priority, need, victims)
        return victims

    def _choose_in(self, priority: Priority, need: float, victims: list[Session]) -> int:
        """Add victims of one class to ``victims`` (idle, then streams); return their bytes."""
        budget = self.max_per_tick
        freed = 0
        for session in self.registry.idle_lru(priority):
            if len(victims) >= budget or freed >= need:
                break
            if session.age >= self.min_session_age:
                victims.append(session)
                freed += session.held_bytes
        if freed < need:
            chosen = {s.id for s in victims}
            for session in self.registry.largest_streams(priority):
                if len(victims) >= budget or freed >= need:
                    break
                if session.id not in chosen:
                    victims.append(session)
                    freed += session.held_bytes
        return freed

    async def evict(self, evictable: Iterable[Reading], target: float) -> list[Session]:
        """Close enough victims to bring the worst evictable source down to ``target``.

        Args:
            evictable: Readings of the sources that may evict (advisory ones left out).
            target: The pressure to work down to (evict threshold minus hysteresis).

        Returns:
            The sessions closed.
        """
        _, worst = highest_pressure(evictable)
        if worst is None or not worst.limit_bytes or (worst.pressure or 0.0) < target:
            return []
        victims = self.choose(worst.used_bytes - target * worst.limit_bytes)
        self.expected_free_bytes = sum(session.held_bytes for session in victims)
        for session in victims:
            await self.close(session, CloseReason.EVICTED)
        return victims

    async def close_idle(self) -> int:
        """Close idle sessions past ``idle_timeout`` (young ones too)."""
        expired = self.registry.expired_idle(self.idle_timeout)
        for session in expired:
            await self.close(session, CloseReason.IDLE_TIMEOUT)
        return len(expired)
