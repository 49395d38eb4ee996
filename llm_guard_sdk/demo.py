"""The demo's model backend, shared by every example app.

``LLM_GUARD_DEMO_BACKEND`` picks it: ``simulated`` (the built-in deterministic generator),
``vllm`` (a real engine; fails clearly when vLLM is missing) or ``auto`` (vLLM when importable).
``LLM_GUARD_DEMO_RATE`` sets the simulator's tokens per second.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.simulator import SimulatedLLM

logger = logging.getLogger("llm_guard_sdk.demo")

BACKENDS = ("auto", "vllm", "simulated")
DEFAULT_MAX_TOKENS = 256


class Backend(Protocol):
    """What an example app needs from a model: text deltas for a prompt."""

    name: str

    def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        """Yield text deltas; must be closed with ``aclose()`` (guard_stream does it)."""
        ...


class SimulatedBackend:
    """The deterministic simulator behind the :class:`Backend` interface."""

    name = "simulated"

    def __init__(self, rate: float = 20.0) -> None:
        self.llm = SimulatedLLM(rate)

    def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        """Yield simulated words."""
        return self.llm.generate(prompt, max_tokens)


def parse_max_tokens(raw: str | int | None, *, limit: int = 4096) -> int:
    """Validate a client's ``max_tokens``; raises ValueError with a message fit for a 400."""
    if raw is None or raw == "":
        return DEFAULT_MAX_TOKENS
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"max_tokens must be an integer in [1, {limit}], got {raw!r}") from None
    if not 1 <= value <= limit:
        raise ValueError(f"max_tokens must be an integer in [1, {limit}], got {value}")
    return value


def select_backend(environ: Mapping[str, str] | None = None) -> Backend:
    """Build the backend ``LLM_GUARD_DEMO_BACKEND`` asks for (see module docstring)."""
    env = os.environ if environ is None else environ
    choice = env.get("LLM_GUARD_DEMO_BACKEND", "auto").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise ConfigError(
            f"LLM_GUARD_DEMO_BACKEND={choice!r} is invalid: expected one of {', '.join(BACKENDS)}"
        )
    raw_rate = env.get("LLM_GUARD_DEMO_RATE", "20")
    try:
        rate = float(raw_rate)
        if rate < 0:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"LLM_GUARD_DEMO_RATE={raw_rate!r} is invalid: expected tokens per second >= 0"
        ) from None
    if choice in ("auto", "vllm"):
        try:
            from llm_guard_sdk.vllm_demo import VLLMBackend
        except ImportError as exc:
            if choice == "vllm":
                raise
            logger.warning("vLLM is not importable (%s); the demo uses the simulator", exc)
        else:
            return VLLMBackend.from_env(env)
    return SimulatedBackend(rate)
