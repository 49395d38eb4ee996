"""Remote engines: OpenAI-compatible servers (``vllm serve`` replicas) streamed over HTTP.

:class:`RemoteEngine` / :func:`stream_openai` put a streaming ``/v1/completions`` or
``/v1/chat/completions`` request under :func:`~llm_guard_sdk.guard_stream`: the HTTP stream is
closed (so the server aborts the request) on every close cause, what it buffers is held bytes,
and failures map to clear client errors and feed the circuit breaker. Needs ``httpx``
(``pip install 'llm-guard-sdk[remote]'``). See ``docs/remote.md``.
"""

from .deps import require_httpx

require_httpx()

from .engine import DEFAULT_TIMEOUT, RemoteEngine, stream_openai  # noqa: E402
from .events import MAX_EVENT_BYTES, SSEDecoder  # noqa: E402

__all__ = ["DEFAULT_TIMEOUT", "MAX_EVENT_BYTES", "RemoteEngine", "SSEDecoder", "stream_openai"]
