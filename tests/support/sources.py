"""A memory source whose reading the test sets, and a guard built on it.

Every test that needs a controlled pressure uses this one fake: set ``used``/``limit`` and call
``guard.sample_now()`` (or let the sampler run) to move the guard between levels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from llm_guard_sdk import Guard, GuardConfig, Reading
from llm_guard_sdk.extensions import Extension


@dataclass
class FakeSource:
    """A ``MemorySource`` answering ``used`` of ``limit`` bytes; ``reads`` counts the samples."""

    used: int = 0
    limit: int | None = 1000
    name: str = "fake"
    reads: int = field(default=0, compare=False)

    def read(self) -> Reading:
        self.reads += 1
        return Reading(self.name, self.used, self.limit)


def make_guard(source: FakeSource | None = None, *, from_env: bool = False,
               extensions: Iterable[Extension | str] = (), **overrides: Any) -> Guard:
    """A guard whose only source is ``source`` (a fresh, pressure-free FakeSource by default).

    The source goes in through the constructor and is reachable as ``guard.sources[0]``.
    The developer's ``LLM_GUARD_*`` environment is ignored (``GuardConfig.defaults``) unless
    ``from_env`` (``overrides`` winning), for apps served in a subprocess.
    """
    settings: dict[str, Any] = {"sources": ("process",), **overrides}
    config = GuardConfig(**settings) if from_env else GuardConfig.defaults(**settings)
    return Guard(config, sources=[source if source is not None else FakeSource()],
                 extensions=extensions)
