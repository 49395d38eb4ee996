"""``llm_guard_sdk.vllm``: the vLLM integration's public names, kept at their first address.

The integration lives in :mod:`llm_guard_sdk.engines.vllm`, apart from the core; this module
re-exports it so ``from llm_guard_sdk.vllm import stream_vllm, VLLMGuard, KVStats`` keeps
working. vLLM itself is still imported only when something needs it.
"""

from llm_guard_sdk.engines.vllm import (
    INSTALL_HINT,
    CompletionDelta,
    KVCacheSource,
    KVStats,
    OutputChunk,
    VLLMGuard,
    VLLMSettings,
    VLLMStreams,
    kv_bytes_per_token,
    require_vllm,
    stream_vllm,
)

__all__ = ["INSTALL_HINT", "CompletionDelta", "KVCacheSource", "KVStats", "OutputChunk",
           "VLLMGuard", "VLLMSettings", "VLLMStreams", "kv_bytes_per_token", "require_vllm",
           "stream_vllm"]
