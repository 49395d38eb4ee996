"""The engine's KV cache seen from the guard: scheduler stats, bytes per token, a source.

vLLM hands its scheduler stats only to stat loggers it constructs itself, once per engine step;
:class:`KVStats` builds such a logger and keeps the latest numbers. :class:`KVCacheSource`
turns the usage fraction into a pressure reading in bytes beside RAM.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

from llm_guard_sdk.monitors import Reading

from .deps import require_vllm

_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2, "half": 2,
                "float32": 4, "float": 4}


class KVStats:
    """Latest scheduler stats of one engine, fed by a ``StatLoggerBase`` vLLM constructs.

    Pass :meth:`logger_factory` as ``AsyncLLM.from_engine_args(..., stat_loggers=[...])``.
    """

    def __init__(self) -> None:
        self.kv_cache_usage = 0.0
        self.num_running_reqs = 0
        self.num_waiting_reqs = 0
        self.records_total = 0
        self.updated_at = 0.0

    def update(self, scheduler_stats: Any) -> None:
        """Copy the three fields we use; never raises (a raising logger kills vLLM's loop)."""
        try:
            self.kv_cache_usage = float(scheduler_stats.kv_cache_usage)
            self.num_running_reqs = int(scheduler_stats.num_running_reqs)
            self.num_waiting_reqs = int(scheduler_stats.num_waiting_reqs)
            self.records_total += 1
            self.updated_at = time.monotonic()
        except Exception:  # a stats glitch must never reach vLLM's output loop
            return

    def logger_factory(self) -> Any:
        """A class vLLM instantiates as ``factory(vllm_config, engine_index)``."""
        require_vllm()
        from vllm.v1.metrics.loggers import StatLoggerBase

        stats = self

        class GuardStatLogger(StatLoggerBase):  # type: ignore[misc,unused-ignore]
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                self.engine_index = engine_index

            def record(self, scheduler_stats: Any, iteration_stats: Any,
                       mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
                if scheduler_stats is not None:
                    stats.update(scheduler_stats)

            def log_engine_initialized(self) -> None:
                return None

        return GuardStatLogger


def kv_bytes_per_token(engine: Any) -> int:
    """2 (K and V) x layers x KV heads x head size x dtype bytes, from the engine's config."""
    model_config = engine.model_config
    parallel = engine.vllm_config.parallel_config
    cache_dtype = str(getattr(engine.vllm_config.cache_config, "cache_dtype", "auto"))
    if cache_dtype == "auto":
        dtype = model_config.dtype
        size = int(getattr(dtype, "itemsize", 0)) or _DTYPE_BYTES.get(str(dtype), 2)
    else:
        size = _DTYPE_BYTES.get(cache_dtype, 2)
    layers = int(model_config.get_num_layers(parallel))
    kv_heads = int(model_config.get_num_kv_heads(parallel))
    return 2 * layers * kv_heads * int(model_config.get_head_size()) * size


def kv_capacity_bytes(engine: Any, bytes_per_token: int) -> int | None:
    """Total KV-cache bytes (blocks x block size x bytes per token), once the engine knows."""
    cache = engine.vllm_config.cache_config
    blocks = getattr(cache, "num_gpu_blocks", None)
    if not blocks:
        return None
    return int(blocks) * int(cache.block_size) * bytes_per_token


class KVOwner(Protocol):
    """What :class:`KVCacheSource` reads from the integration that owns it."""

    @property
    def kv(self) -> KVStats:
        """The engine's latest scheduler stats."""
        ...

    def kv_capacity_bytes(self) -> int | None:
        """Total KV-cache bytes, None until the engine allocated its cache."""
        ...

    def unfinished(self) -> int:
        """Requests the engine still holds."""
        ...


KV_SOURCE = "vllm_kv"
"""The name of the KV-cache source in readings and status."""


class KVCacheSource:
    """KV-cache usage as a pressure source: used/limit in KV bytes, pressure = usage fraction."""

    def __init__(self, owner: KVOwner) -> None:
        self.owner = owner
        self.name = KV_SOURCE

    def read(self) -> Reading:
        """Scale the engine's usage fraction to bytes of its KV cache."""
        capacity = self.owner.kv_capacity_bytes() or 1_000_000
        usage = self.owner.kv.kv_cache_usage if self.owner.unfinished() else 0.0
        return Reading(self.name, round(usage * capacity), capacity,
                       {"running": self.owner.kv.num_running_reqs,
                        "waiting": self.owner.kv.num_waiting_reqs})
