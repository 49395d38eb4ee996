"""What every monitor produces and the one list of built-in source names.

The interface is deliberately tiny (a name and a synchronous ``read``) so that later sources
such as a vLLM KV cache or GPU memory plug in without touching the sampler or the policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

SOURCE_NAMES = ("process", "cgroup", "host")
"""The built-in sources, in report order; ``GuardConfig.sources`` picks from these."""


@dataclass(frozen=True, slots=True)
class Reading:
    """One sample of one source; frozen so the policy can hold it without copying.

    Attributes:
        name: The source that produced it, so the policy can say what tripped.
        used_bytes: Memory in use as the source counts it.
        limit_bytes: The ceiling that matters, or None when the source has none.
        detail: Small source-specific extras for logs and metrics (e.g. children RSS).

    """

    name: str
    used_bytes: int
    limit_bytes: int | None
    detail: Mapping[str, float | int | str] = field(default_factory=dict)

    @property
    def pressure(self) -> float | None:
        """Return used/limit, or None so sources without a ceiling never trigger the policy."""
        if not self.limit_bytes or self.limit_bytes <= 0:
            return None
        return self.used_bytes / self.limit_bytes


class MemorySource(Protocol):
    """Anything the sampler can poll every tick.

    ``read`` runs on the sampler's hot path, so it must be cheap and synchronous. Expected
    conditions must not raise; transient failures raise ``OSError``, which the sampler
    tolerates, so one bad read does not stop sampling.
    """

    @property
    def name(self) -> str:
        """Return the stable label used in readings, logs and metrics."""
        ...

    def read(self) -> Reading:
        """Return a fresh sample."""
        ...
