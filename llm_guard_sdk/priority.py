"""Priority classes: a small fixed, ordered set deciding who is evicted and shed first.

Fixed on purpose: the registry keeps one idle LRU and one set of size buckets per class, so
choosing victims stays O(1) per class, and an operator can reason about three classes.
"""

from __future__ import annotations

import enum

__all__ = ["PRIORITY_NAMES", "Priority", "parse_priority"]


class Priority(enum.IntEnum):
    """Ordered so ``priority <= Priority.NORMAL`` reads naturally; low is evicted first."""

    LOW = 0
    NORMAL = 1
    HIGH = 2

    @property
    def label(self) -> str:
        """Lower-case name, as settings, headers and status spell it."""
        return self.name.lower()


PRIORITY_NAMES = tuple(p.label for p in Priority)
"""``("low", "normal", "high")``, lowest first."""


def parse_priority(text: str) -> Priority:
    """The class named ``text`` (case-insensitive); ValueError for any other name."""
    name = text.strip().lower()
    if name not in PRIORITY_NAMES:
        raise ValueError(text)
    return Priority[name.upper()]
