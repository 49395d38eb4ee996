"""Start a real vLLM ``AsyncLLM`` engine on CPU with sane, test-friendly settings.

Typical use (the engine core runs in a spawned child process, so code that starts
an engine must be guarded by ``if __name__ == "__main__":`` in scripts)::

    from llm_guard_sdk.testing.engine import make_async_llm
    from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

    engine = make_async_llm(ensure_tiny_model())
    try:
        ...  # async for out in engine.generate(prompt, params, request_id): ...
    finally:
        engine.shutdown()

vLLM is imported lazily, inside :func:`make_async_llm`.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any

__all__ = ["DEFAULT_KV_CACHE_MEMORY_BYTES", "engine_env", "make_async_llm", "shutdown_async_llm"]

#: 64 MiB of KV cache: with the tiny model (2 layers x 4 KV heads x 32 head dim,
#: float32) one 16-token block takes 32 KiB, so this is ~2048 blocks.
DEFAULT_KV_CACHE_MEMORY_BYTES = 64 * 2**20


def engine_env(tmpdir: str | os.PathLike[str]) -> dict[str, str]:
    """Return the environment variables a CPU test engine needs.

    All on-disk state vLLM/torch would write (IPC sockets, compile caches) goes
    under ``tmpdir``; usage reporting is off; the host IP is loopback.
    """
    root = os.fspath(tmpdir)
    return {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_RPC_BASE_PATH": os.path.join(root, "rpc"),
        "VLLM_CACHE_ROOT": os.path.join(root, "vllm-cache"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor-cache"),
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def _apply_env() -> None:
    tmpdir = os.environ.get("LLM_GUARD_ENGINE_TMPDIR")
    if not tmpdir:
        tmpdir = tempfile.mkdtemp(prefix="llm-guard-vllm-")
        os.environ["LLM_GUARD_ENGINE_TMPDIR"] = tmpdir
        atexit.register(shutil.rmtree, tmpdir, ignore_errors=True)
    for key, value in engine_env(tmpdir).items():
        os.environ.setdefault(key, value)
    for key in ("VLLM_RPC_BASE_PATH", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
        os.makedirs(os.environ[key], exist_ok=True)


def make_async_llm(
    model_dir: str | os.PathLike[str],
    *,
    kv_cache_memory_bytes: int = DEFAULT_KV_CACHE_MEMORY_BYTES,
    max_model_len: int = 512,
    max_num_seqs: int = 32,
    stat_loggers: Sequence[Any] | None = None,
    **extra: Any,
) -> Any:
    """Build a ``vllm.v1.engine.async_llm.AsyncLLM`` for ``model_dir`` on CPU.

    Sets the variables from :func:`engine_env` with ``os.environ.setdefault``
    (a temporary directory is created once per process unless
    ``LLM_GUARD_ENGINE_TMPDIR`` is set), then calls
    ``AsyncLLM.from_engine_args(AsyncEngineArgs(...))``.

    Args:
        model_dir: A Hugging Face model directory (e.g. from
            :func:`llm_guard_sdk.testing.tiny_model.ensure_tiny_model`).
        kv_cache_memory_bytes: KV cache size in bytes (replaces
            ``gpu_memory_utilization``/``VLLM_CPU_KVCACHE_SPACE`` sizing).
        max_model_len: Maximum prompt + generated tokens per request.
        max_num_seqs: Maximum concurrently running requests.
        stat_loggers: Factories for ``StatLoggerBase`` subclasses; each is called
            as ``factory(vllm_config, engine_index)`` (a subclass itself works).
        **extra: Any further ``AsyncEngineArgs`` field, overriding the defaults.

    Returns:
        The started ``AsyncLLM`` (its engine core runs in a child process). Call
        ``engine.shutdown()`` when done.

    """
    _apply_env()

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    model = os.fspath(model_dir)
    args: dict[str, Any] = {
        "model": model,
        "tokenizer": model,
        "dtype": "float32",
        "seed": 0,
        "max_model_len": max_model_len,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max(max_model_len, 2048),
        "kv_cache_memory_bytes": kv_cache_memory_bytes,
        "distributed_executor_backend": "uni",
        "enforce_eager": True,
        "disable_log_stats": True,
        "enable_log_requests": False,
    }
    args.update(extra)
    engine_args = AsyncEngineArgs(**args)
    return AsyncLLM.from_engine_args(
        engine_args, stat_loggers=list(stat_loggers) if stat_loggers is not None else None
    )


def shutdown_async_llm(engine: Any, timeout: float | None = None) -> None:
    """Stop ``engine`` and release its ZeroMQ context.

    ``AsyncLLM.shutdown()`` stops the engine-core process (about 2-3 s on CPU)
    but never terminates the client's ``zmq.Context``; garbage-collecting it
    later emits ``ResourceWarning: Unclosed context``, which ``pytest -W error``
    turns into a ``PytestUnraisableExceptionWarning``. Call this from the event
    loop thread that used the engine, so its sockets are closed synchronously
    and the context can be terminated without blocking. Idempotent.
    """
    engine.shutdown(timeout=timeout)
    ctx = getattr(getattr(engine, "engine_core", None), "ctx", None)
    if ctx is None:
        return
    # zmq.asyncio.Context shadows a plain zmq.Context; the plain one owns the
    # native context and is the one that warns when collected unterminated.
    underlying = getattr(ctx, "_shadow_obj", None) or ctx
    if getattr(underlying, "closed", True):
        return
    sockets = list(getattr(ctx, "_sockets", ()) or ()) + list(
        getattr(underlying, "_sockets", ()) or ()
    )
    if all(getattr(sock, "closed", False) for sock in sockets):
        # All sockets closed: term() cannot block.
        underlying.term()
