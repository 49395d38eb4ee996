"""A real ``vllm serve`` for this folder, one per test session (skipped only without vLLM)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.vllm_server import VLLMServer, vllm_missing_reason


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def vllm_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """The tiny model behind vLLM's OpenAI server on 127.0.0.1 (about a minute to start).

    Served with ``--middleware llm_guard_sdk.GuardMiddleware`` (docs/vllm.md): the guard on
    the server's own routes, checked by ``test_guard_middleware_inside_vllm_serve``.
    """
    reason = vllm_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

    server = VLLMServer(ensure_tiny_model(), tmp_path_factory.mktemp("vllm-serve"),
                        args=("--middleware", "llm_guard_sdk.GuardMiddleware"),
                        env={"LLM_GUARD_SOURCES": "process"})
    server.start()
    try:
        yield server
    finally:
        server.stop()
