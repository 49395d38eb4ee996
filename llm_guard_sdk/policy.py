"""Watermark policy: pressure in, overload level out, with hysteresis so levels do not flap.

Modelled on Envoy's overload manager: each source reports a pressure (used/limit); the policy
takes the highest and maps it to ``normal → warn → evict → shed``. A level is entered as soon as
pressure reaches its threshold and left only once pressure falls ``hysteresis`` below it, so noise
around a threshold does not toggle shedding on and off every sample.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from llm_guard_sdk.monitors.base import Reading


class Level(enum.IntEnum):
    """Overload levels, ordered so ``level >= Level.EVICT`` reads naturally."""

    NORMAL = 0
    WARN = 1
    EVICT = 2
    SHED = 3

    @property
    def label(self) -> str:
        """Lower-case name used in status JSON and metrics labels."""
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The three watermarks and the hysteresis band, as fractions of the limit."""

    warn: float
    evict: float
    shed: float
    hysteresis: float

    def of(self, level: Level) -> float:
        """Pressure at which ``level`` is entered (0 for NORMAL)."""
        return {Level.NORMAL: 0.0, Level.WARN: self.warn, Level.EVICT: self.evict,
                Level.SHED: self.shed}[level]


def highest_pressure(readings: Iterable[Reading]) -> tuple[float, Reading | None]:
    """The worst pressure across sources, and the reading it came from."""
    worst: Reading | None = None
    worst_pressure = 0.0
    for reading in readings:
        pressure = reading.pressure
        if pressure is not None and (worst is None or pressure > worst_pressure):
            worst, worst_pressure = reading, pressure
    return worst_pressure, worst


class WatermarkPolicy:
    """Stateful level tracker; feed it one pressure per sample."""

    def __init__(self, thresholds: Thresholds) -> None:
        self.thresholds = thresholds
        self.level = Level.NORMAL

    def update(self, pressure: float) -> Level:
        """Return the level for ``pressure`` given the current level (hysteresis applies)."""
        t = self.thresholds
        level = Level.NORMAL
        for candidate in (Level.SHED, Level.EVICT, Level.WARN):
            enter = t.of(candidate)
            # Staying at (or above) a level only needs pressure above its exit point.
            bar = enter - t.hysteresis if candidate <= self.level else enter
            if pressure >= bar:
                level = candidate
                break
        self.level = level
        return level

    def evict_target(self) -> float:
        """Pressure the evictor works down to: the evict threshold minus hysteresis."""
        return self.thresholds.evict - self.thresholds.hysteresis
