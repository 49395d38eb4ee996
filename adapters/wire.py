"""What every adapter tells the client the same way: compact JSON and the eviction notice.

FastAPI, Litestar and Channels apps must look alike on the wire so one client works against
all of them; the SSE events (:mod:`.sse`) and the chat frames (:mod:`.chat`) both build on
these rules.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

from llm_guard_sdk.errors import BackendError
from llm_guard_sdk.session import CloseReason
from llm_guard_sdk.stream import GuardedStream

logger = logging.getLogger("llm_guard_sdk")

_ENDED_BY_CLIENT_OR_MODEL: Final = (CloseReason.COMPLETED, CloseReason.DISCONNECTED,
                                    CloseReason.SEND_TIMEOUT, CloseReason.PING_TIMEOUT)


def dumps(payload: object) -> str:
    """Compact JSON, as every adapter sends it (non-ASCII text stays as it is)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def eviction_reason(stream: GuardedStream[Any]) -> CloseReason | None:
    """Why the guard stopped ``stream``, or None when the model finished or the client left.

    Only a stop by the guard (eviction, a chunk or stream timeout, shutdown) is worth an
    ``evicted`` notice: the client should know its answer was cut short and why.
    """
    reason = stream.close_reason
    if reason is None or reason in _ENDED_BY_CLIENT_OR_MODEL:
        return None
    return reason


def model_failure(exc: Exception) -> BackendError:
    """A model stream that raised mid-stream (not a :class:`BackendError`): log it, tell the client.

    Once the response or the chat turn has started, no framework handler can answer the
    client any more: the exception would only cut the connection (a silent end of an SSE body,
    a WebSocket closed 1011/4500) and fill the log with "Exception in ASGI application". The
    adapters log it once here, with its traceback (it is the app's bug), and send the client
    the usual error event or frame instead; the message never contains the exception's text.
    """
    logger.error("llm-guard: the model's stream raised mid-stream (%s); the client got an "
                 "error", type(exc).__name__, exc_info=exc)
    return BackendError("the model failed while streaming", reason="model_error")
