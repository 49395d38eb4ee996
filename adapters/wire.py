"""What every adapter tells the client the same way: compact JSON and the eviction notice.

FastAPI, Litestar and Channels apps must look alike on the wire so one client works against
all of them; the SSE events (:mod:`.sse`) and the chat frames (:mod:`.chat`) both build on
these two rules.
"""

from __future__ import annotations

import json
from typing import Any, Final

from llm_guard_sdk.session import CloseReason
from llm_guard_sdk.stream import GuardedStream

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
