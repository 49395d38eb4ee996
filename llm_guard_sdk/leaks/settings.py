"""The leak extension's settings: how long a closed session's objects may live, what logs show.

They live with the extension (the core's :class:`~llm_guard_sdk.config.GuardConfig` knows
nothing of leaks) on the same strict machinery: ``LeakSettings(leak_grace=0)`` reads the other
fields from ``LLM_GUARD_LEAK_GRACE`` / ``LLM_GUARD_LOG_CONTENT``, keyword arguments winning;
``LeakSettings.defaults(...)`` ignores the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from llm_guard_sdk.settings import BOOL_FORM, NON_NEGATIVE, Rule, Settings, flag

__all__ = ["LeakSettings"]


@dataclass(frozen=True, slots=True)
class LeakSettings(Settings):
    """Settings of the leak sweeper (``LLM_GUARD_LEAKS=1`` enables it).

    Attributes:
        leak_grace: Seconds after a session closed before what it owned is suspected of
            leaking (``LLM_GUARD_LEAK_GRACE``).
        log_content: Show reprs and dict keys in leak reports (``LLM_GUARD_LOG_CONTENT``); off
            by default because prompts and tokens are user data.
        snapshot_min_interval: Seconds between two ``/llm-guard/snapshot`` heap walks
            (``LLM_GUARD_SNAPSHOT_MIN_INTERVAL``); earlier requests get 429 + ``Retry-After``.
    """

    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({
        "leak_grace": Rule(NON_NEGATIVE, "expected seconds >= 0, e.g. 5"),
        "log_content": Rule(flag, BOOL_FORM),
        "snapshot_min_interval": Rule(NON_NEGATIVE, "expected seconds >= 0, e.g. 10"),
    })
    WARN_UNKNOWN: ClassVar[bool] = False  # GuardConfig warns about LLM_GUARD_* for everyone

    leak_grace: float = 5.0
    log_content: bool = False
    snapshot_min_interval: float = 10.0
