"""The demo's model backends, shared by every example app and the end-to-end tests.

``LLM_GUARD_DEMO_BACKEND`` picks it: ``auto`` (default: a real vLLM engine when vLLM is
importable, else the simulator), ``vllm`` (fail clearly when vLLM is missing), ``simulated``, or
``remote`` (an OpenAI-compatible server at ``LLM_GUARD_DEMO_REMOTE_URL``, e.g. a ``vllm serve``
replica: see :class:`RemoteBackend`). ``LLM_GUARD_DEMO_MODEL`` points the vLLM backend at a
model path or name (default: the tiny model, built once into a cache directory), and names the
remote backend's served model; ``LLM_GUARD_DEMO_RATE`` sets the simulator's tokens
per second; ``LLM_GUARD_DEMO_KV_CACHE_BYTES`` and ``LLM_GUARD_DEMO_MAX_MODEL_LEN`` size the
tiny model's engine.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from llm_guard_sdk.config import parse_size
from llm_guard_sdk.errors import ConfigError, MissingDependencyError
from llm_guard_sdk.testing.simulator import SimulatedLLM

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard

logger = logging.getLogger(__name__)

BACKENDS = ("auto", "vllm", "simulated", "remote")
DEFAULT_MAX_TOKENS = 256
MAX_TOKENS_LIMIT = 4096


class Backend(Protocol):
    """What an example app needs from a model: start, text deltas for a prompt, close."""

    name: str

    async def start(self, guard: Guard) -> None:
        """Load the model and connect it to ``guard`` (sources, status)."""
        ...

    def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        """Yield text deltas; closed with ``aclose()`` by guard_stream."""
        ...

    async def close(self) -> None:
        """Release the model."""
        ...


class SimulatedBackend:
    """The deterministic simulator behind the :class:`Backend` interface."""

    name = "simulated"

    def __init__(self, rate: float = 20.0) -> None:
        self.llm = SimulatedLLM(rate)

    async def start(self, guard: Guard) -> None:
        """Nothing to load."""

    def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        """Yield simulated words."""
        return self.llm.generate(prompt, max_tokens)

    async def close(self) -> None:
        """Nothing to release."""


class VLLMBackend:
    """A real ``AsyncLLM``: the tiny local model by default, or ``LLM_GUARD_DEMO_MODEL``."""

    name = "vllm"

    def __init__(self, model: str | None = None, *, kv_cache_bytes: int = 64 * 2**20,
                 max_model_len: int = 512) -> None:
        self.model = model
        self.kv_cache_bytes = kv_cache_bytes
        self.max_model_len = max_model_len
        self.engine: Any = None
        self.integration: Any = None
        self._params: Any = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> VLLMBackend:
        """Read the ``LLM_GUARD_DEMO_*`` engine settings."""
        raw_kv = env.get("LLM_GUARD_DEMO_KV_CACHE_BYTES", "") or "64MiB"
        raw_len = env.get("LLM_GUARD_DEMO_MAX_MODEL_LEN", "") or "512"
        try:
            kv_bytes = parse_size(raw_kv)
        except ValueError:
            raise ConfigError(f"LLM_GUARD_DEMO_KV_CACHE_BYTES={raw_kv!r} is invalid: expected "
                              "a size such as 64MiB") from None
        if not raw_len.isdigit() or int(raw_len) < 16:
            raise ConfigError(f"LLM_GUARD_DEMO_MAX_MODEL_LEN={raw_len!r} is invalid: expected "
                              "an integer >= 16")
        return cls(env.get("LLM_GUARD_DEMO_MODEL") or None, kv_cache_bytes=kv_bytes,
                   max_model_len=int(raw_len))

    async def start(self, guard: Guard) -> None:
        """Build the tiny model if needed, start the engine, register it with the guard."""
        from vllm import SamplingParams

        from llm_guard_sdk.engines.vllm import KVStats, VLLMGuard
        from llm_guard_sdk.testing.engine import make_async_llm

        kv = KVStats()
        loggers = [kv.logger_factory()]
        if self.model is None:
            from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

            self.engine = make_async_llm(ensure_tiny_model(), stat_loggers=loggers,
                                         kv_cache_memory_bytes=self.kv_cache_bytes,
                                         max_model_len=self.max_model_len)
            self._params = SamplingParams(ignore_eos=True)  # random weights: keep streaming
        else:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.v1.engine.async_llm import AsyncLLM

            self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=self.model),
                                                    stat_loggers=loggers)
            self._params = SamplingParams()
        self.integration = VLLMGuard(self.engine, guard, kv=kv)
        logger.info("demo backend: vLLM engine ready (%s)", self.model or "tiny model")

    def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        """Text deltas from the engine, aborted when the stream is closed early."""
        params = self._params.clone()
        params.max_tokens = max_tokens
        stream: AsyncIterator[str] = self.integration.stream(prompt, params)
        return stream

    async def close(self) -> None:
        """Stop the engine and its core process."""
        if self.engine is not None:
            from llm_guard_sdk.testing.engine import shutdown_async_llm

            shutdown_async_llm(self.engine)
            self.engine = None


class RemoteBackend:
    """An OpenAI-compatible server (``LLM_GUARD_DEMO_REMOTE_URL``) through a RemoteEngine.

    ``LLM_GUARD_DEMO_MODEL`` is the served model name; ``LLM_GUARD_DEMO_REMOTE_PARAMS`` an
    optional JSON object of further body fields (``{"ignore_eos": true}`` keeps vLLM's tiny
    random model streaming to ``max_tokens``).
    """

    name = "remote"

    def __init__(self, base_url: str, model: str, params: Mapping[str, Any] | None = None) -> None:
        self.base_url, self.model, self.params = base_url, model, dict(params or {})
        self.engine: Any = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RemoteBackend:
        """Read ``LLM_GUARD_DEMO_REMOTE_URL``, ``_MODEL`` and ``_REMOTE_PARAMS``."""
        url = env.get("LLM_GUARD_DEMO_REMOTE_URL", "").strip()
        model = env.get("LLM_GUARD_DEMO_MODEL", "").strip()
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"LLM_GUARD_DEMO_REMOTE_URL={url!r} is invalid: expected the "
                              "server's OpenAI base URL, e.g. http://127.0.0.1:8001/v1")
        if not model:
            raise ConfigError("LLM_GUARD_DEMO_MODEL is required with LLM_GUARD_DEMO_BACKEND="
                              "remote: the served model name, e.g. tiny")
        raw = env.get("LLM_GUARD_DEMO_REMOTE_PARAMS", "").strip() or "{}"
        try:
            params = json.loads(raw)
        except ValueError:
            params = None
        if not isinstance(params, dict):
            raise ConfigError(f"LLM_GUARD_DEMO_REMOTE_PARAMS={raw!r} is invalid: expected a "
                              'JSON object, e.g. {"ignore_eos": true}')
        return cls(url, model, params)

    async def start(self, guard: Guard) -> None:
        """Register the remote engine on ``guard`` (status section ``remote``)."""
        from llm_guard_sdk.engines.openai import RemoteEngine

        self.engine = RemoteEngine(self.base_url, self.model, guard=guard)
        logger.info("demo backend: remote server %s, model %s", self.base_url, self.model)

    def stream(self, prompt: str, max_tokens: int) -> AsyncIterator[str]:
        """Text deltas from the server; the HTTP stream closes with the guarded stream."""
        stream: AsyncIterator[str] = self.engine.stream(prompt, max_tokens=max_tokens,
                                                        params=self.params)
        return stream

    async def close(self) -> None:
        """Close the engine's HTTP client."""
        if self.engine is not None:
            await self.engine.aclose()
            self.engine = None


def parse_max_tokens(raw: object, *, limit: int = MAX_TOKENS_LIMIT) -> int:
    """Validate a client's ``max_tokens``; raises ValueError with a message fit for a 400."""
    if raw is None or raw == "":
        return DEFAULT_MAX_TOKENS
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise ValueError(f"max_tokens must be an integer in [1, {limit}], got {raw!r}")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"max_tokens must be an integer in [1, {limit}], got {raw!r}") from None
    if not 1 <= value <= limit:
        raise ValueError(f"max_tokens must be an integer in [1, {limit}], got {value}")
    return value


def select_backend(environ: Mapping[str, str] | None = None) -> Backend:
    """Build the backend ``LLM_GUARD_DEMO_BACKEND`` asks for (see module docstring)."""
    env = os.environ if environ is None else environ
    choice = env.get("LLM_GUARD_DEMO_BACKEND", "auto").strip().lower() or "auto"
    if choice not in BACKENDS:
        raise ConfigError(f"LLM_GUARD_DEMO_BACKEND={choice!r} is invalid: expected one of "
                          f"{', '.join(BACKENDS)}")
    raw_rate = env.get("LLM_GUARD_DEMO_RATE", "") or "20"
    try:
        rate = float(raw_rate)
        if not rate >= 0:
            raise ValueError(raw_rate)
    except ValueError:
        raise ConfigError(f"LLM_GUARD_DEMO_RATE={raw_rate!r} is invalid: expected tokens per "
                          "second >= 0, e.g. 20") from None
    if choice == "remote":
        return RemoteBackend.from_env(env)
    if choice != "simulated":
        if importlib.util.find_spec("vllm") is not None:
            return VLLMBackend.from_env(env)
        if choice == "vllm":
            from llm_guard_sdk.engines.vllm import INSTALL_HINT

            raise MissingDependencyError("vLLM (LLM_GUARD_DEMO_BACKEND=vllm)", "vllm",
                                         command=INSTALL_HINT)
        logger.warning("vLLM is not installed: the demo uses the simulated backend")
    return SimulatedBackend(rate)
