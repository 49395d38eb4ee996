"""The vLLM integration's settings, on the core's strict settings machinery.

``VLLMSettings(max_waiting_requests=100)`` reads the fields not given from the environment
(``LLM_GUARD_MAX_WAITING_REQUESTS``), keyword arguments winning; ``VLLMSettings.defaults()``
ignores the environment. The core's ``GuardConfig`` knows only the variable's name, so that
its unknown-variable warning spares it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar

from llm_guard_sdk.settings import Rule, Settings, number

__all__ = ["VLLMSettings"]


@dataclass(frozen=True, slots=True)
class VLLMSettings(Settings):
    """Settings of :class:`~llm_guard_sdk.engines.vllm.VLLMGuard`.

    Attributes:
        max_waiting_requests: Shed new sessions while more requests than this wait in the
            engine's queue (``LLM_GUARD_MAX_WAITING_REQUESTS``); None: no limit.
    """

    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({
        "max_waiting_requests": Rule(number(lambda x: x >= 1, integer=True, none=True),
                                     "expected an integer >= 1, or empty for no limit, e.g. 100"),
    })
    WARN_UNKNOWN: ClassVar[bool] = False  # GuardConfig warns about LLM_GUARD_* for everyone

    max_waiting_requests: int | None = None
