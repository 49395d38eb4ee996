"""Settings of the quota extension, ``LLM_GUARD_QUOTA_*``, checked once at start-up.

Built on the guard's strict settings machinery (:mod:`llm_guard_sdk.settings`): an invalid
value or a misspelt ``LLM_GUARD_QUOTA_*`` variable stops start-up naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from llm_guard_sdk.quota.model import TARGETS
from llm_guard_sdk.settings import BOOL_FORM, COUNT, POSITIVE, Rule, Settings, flag, number


def _target(value: object) -> str:
    if isinstance(value, str) and value.strip().lower() in TARGETS:
        return value.strip().lower()
    raise ValueError(value)


def _path(value: object) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    raise TypeError(value)


@dataclass(frozen=True, slots=True)
class QuotaSettings(Settings):
    """How the recorder windows, keeps and uses its observations.

    Attributes:
        window: Seconds per observation window (``LLM_GUARD_QUOTA_WINDOW``). Long enough for
            several samples (``sample_interval``) and several requests per window.
        ring_size: Observations kept, oldest dropped first (``LLM_GUARD_QUOTA_RING_SIZE``).
        admission: Refuse a new session whose predicted footprint would push memory past the
            evict watermark (``LLM_GUARD_QUOTA_ADMISSION``), once a fit exists.
        file: JSON file of observations, loaded at start-up and rewritten after each window
            (``LLM_GUARD_QUOTA_FILE``), so a restart keeps what was learnt.
        target: What ``M`` is: ``process`` (peak process memory reading, what eviction acts
            on) or ``held`` (peak bytes the sessions account) (``LLM_GUARD_QUOTA_TARGET``).
        session_seconds: Mean session duration ``D`` to assume until sessions have been seen
            to close (``LLM_GUARD_QUOTA_SESSION_SECONDS``); empty: wait for measurements.
    """

    ENV_PREFIX: ClassVar[str] = "LLM_GUARD_QUOTA_"
    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({
        "window": Rule(POSITIVE, "expected seconds > 0, e.g. 10"),
        "ring_size": Rule(COUNT, "expected an integer >= 1, e.g. 360"),
        "admission": Rule(flag, BOOL_FORM),
        "file": Rule(_path, "expected a file path, or empty for none", text=True),
        "target": Rule(_target, f"expected one of {', '.join(TARGETS)}", text=True),
        "session_seconds": Rule(number(lambda x: x > 0, none=True),
                                "expected seconds > 0, or empty to measure, e.g. 30"),
    })

    window: float = 10.0
    ring_size: int = 360
    admission: bool = False
    file: str | None = None
    target: str = "process"
    session_seconds: float | None = None
