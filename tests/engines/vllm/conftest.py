"""A real vLLM engine for the tests in this folder (skipped only where vLLM cannot be imported)."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from typing import Any

import pytest

if importlib.util.find_spec("vllm") is None:
    collect_ignore_glob = ["test_*.py"]

from llm_guard_sdk import Guard, GuardConfig

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """One event loop for the whole session: one engine per loop."""
    return "asyncio"


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

    return ensure_tiny_model()


@pytest.fixture(scope="session")
async def engine_bundle(tiny_model: Any) -> AsyncIterator[dict[str, Any]]:
    """One AsyncLLM for the session, with its KV stats; max_num_seqs=2 so requests queue."""
    from llm_guard_sdk.testing.engine import make_async_llm, shutdown_async_llm
    from llm_guard_sdk.vllm import KVStats

    kv = KVStats()
    engine = make_async_llm(tiny_model, stat_loggers=[kv.logger_factory()],
                            max_num_seqs=2, max_model_len=512)
    try:
        yield {"engine": engine, "kv": kv}
    finally:
        shutdown_async_llm(engine)


@pytest.fixture
def guard() -> Guard:
    return Guard(GuardConfig.defaults(sources=("process",)))
