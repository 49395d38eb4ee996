"""A deterministic stand-in for an LLM, so the demo and tests run where vLLM cannot.

Tokens are words picked from a fixed vocabulary by a hash of the prompt, produced at a steady
rate. It counts generators started, closed and finished so tests can prove none was leaked.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

_VOCAB = [
    "the",
    "model",
    "streams",
    "tokens",
    "while",
    "the",
    "guard",
    "watches",
    "memory",
    "and",
    "closes",
    "what",
    "the",
    "client",
    "no",
    "longer",
    "reads",
    "so",
    "the",
    "server",
    "keeps",
    "serving",
    "every",
    "other",
    "conversation",
    "without",
    "running",
    "out",
    "of",
    "memory",
    "under",
    "load",
]


@dataclass
class SimulatorStats:
    """Lifecycle counters; ``open`` is what a leak would leave behind."""

    started: int = 0
    closed: int = 0
    finished: int = 0

    @property
    def open(self) -> int:
        """Generators started and not yet closed."""
        return self.started - self.closed


class SimulatedLLM:
    """Produces ``max_tokens`` words at ``rate`` tokens per second (0 = as fast as possible)."""

    def __init__(self, rate: float = 50.0) -> None:
        self.rate = rate
        self.stats = SimulatorStats()

    async def generate(self, prompt: str, max_tokens: int = 256) -> AsyncIterator[str]:
        """Yield text deltas; ``finally`` counts the close so tests see generator cleanup."""
        self.stats.started += 1
        seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big")
        delay = 1.0 / self.rate if self.rate > 0 else 0.0
        try:
            for i in range(max_tokens):
                await asyncio.sleep(delay)
                word = _VOCAB[(seed + i * 7919) % len(_VOCAB)]
                yield word if i == 0 else " " + word
            self.stats.finished += 1
        finally:
            self.stats.closed += 1
