"""Stream timeouts: close streams stuck waiting too long, or open too long."""

from __future__ import annotations

import time

from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import CloseReason


class StreamTimeouts:
    """Closes streams waiting longer than ``chunk_timeout`` or older than ``stream_timeout``.

    The hot path reads no clock; a stream counts as stuck from the first sample that sees it
    waiting with an unchanged chunk count, so the timeout is precise to one sample interval.

    Args:
        registry: Its streaming sessions are the ones checked.
        chunk_timeout: Seconds a consumer may wait for one chunk; None for no limit.
        stream_timeout: Seconds a stream may stay open; None for no limit.
    """

    def __init__(self, registry: SessionRegistry, *, chunk_timeout: float | None,
                 stream_timeout: float | None) -> None:
        self.registry = registry
        self.chunk_timeout = chunk_timeout
        self.stream_timeout = stream_timeout

    async def run(self) -> int:
        """Check every open stream once; returns how many were asked to close."""
        chunk_timeout, stream_timeout = self.chunk_timeout, self.stream_timeout
        if chunk_timeout is None and stream_timeout is None:
            return 0
        now = time.monotonic()
        closed = 0
        for session in list(self.registry.largest_streams()):
            for stream in session.streams:
                if not stream.waiting or stream.chunks != stream.stuck_chunks:
                    stream.stuck_chunks = stream.chunks if stream.waiting else -1
                    stream.stuck_since = now
                stuck = now - stream.stuck_since if stream.stuck_chunks >= 0 else 0.0
                if (chunk_timeout is not None and stuck > chunk_timeout) or (
                        stream_timeout is not None and now - stream.started_at > stream_timeout):
                    await stream.request_close(CloseReason.TIMEOUT)
                    closed += 1
        return closed
