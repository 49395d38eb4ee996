"""The sources the guard polls, their latest readings and the worst pressure among them."""

from __future__ import annotations

from llm_guard_sdk.monitors.base import MemorySource, Reading
from llm_guard_sdk.policy import highest_pressure


class Sampler:
    """Reads every source once per tick; the policy then acts on :attr:`pressure`.

    :attr:`pressure` is the worst of the *evicting* sources only: an advisory source (a pool the
    backend manages itself, such as vLLM's KV cache) is read and reported but never moves the
    guard's level, so it cannot shed or evict unrelated work. Whoever owns such a source acts
    on its own pressure, read with :meth:`pressure_of`.

    Args:
        sources: The sources to poll, in report order (a list others may append to).
        limit_bytes: The effective memory limit, for status (see ``detect_limit``).
    """

    def __init__(self, sources: list[MemorySource], limit_bytes: int | None) -> None:
        self.sources = sources
        self.limit_bytes = limit_bytes
        self.readings: dict[str, Reading] = {}
        self.pressure = 0.0
        self.worst_source = ""
        self.advisory: set[str] = set()
        """Sources reported but left out of :attr:`pressure` (e.g. vLLM's KV cache)."""

    def add(self, source: MemorySource, *, evicts: bool = True) -> None:
        """Poll ``source`` too; ``evicts=False`` makes it advisory."""
        self.sources.append(source)
        if not evicts:
            self.advisory.add(source.name)

    def read(self) -> float:
        """Read every source (skipping one raising ``OSError``); return the worst evicting one."""
        readings: dict[str, Reading] = {}
        for source in self.sources:
            try:
                reading = source.read()
            except OSError:
                continue
            readings[reading.name] = reading
        self.readings = readings
        self.pressure, worst = highest_pressure(self.evictable())
        self.worst_source = worst.name if worst is not None else ""
        return self.pressure

    def evictable(self) -> list[Reading]:
        """The latest readings of the sources that decide the level and may evict sessions."""
        return [r for name, r in self.readings.items() if name not in self.advisory]

    def pressure_of(self, name: str) -> float | None:
        """The latest pressure of one source (advisory or not); None if unknown or unlimited."""
        reading = self.readings.get(name)
        return reading.pressure if reading is not None else None
