"""Graceful degradation under pressure (the ``"degrade"`` extension).

Engines build a :class:`DegradeRequest` per new request and send what
``Degrader.of(guard).apply(request)`` returns: at the degrade level a hook may cap
``max_tokens``, switch the model or shorten the history. See ``docs/adaptive.md``.
"""

from llm_guard_sdk.degrade.degrader import (
    DEGRADE_KINDS,
    Degrader,
    DegradeSettings,
    HeadroomPolicy,
    degrade_level,
)
from llm_guard_sdk.degrade.request import (
    DegradeDecision,
    DegradeHook,
    DegradeRequest,
    headroom,
    headroom_cap,
)

__all__ = [
    "DEGRADE_KINDS",
    "DegradeDecision",
    "DegradeHook",
    "DegradeRequest",
    "DegradeSettings",
    "Degrader",
    "HeadroomPolicy",
    "degrade_level",
    "headroom",
    "headroom_cap",
]
