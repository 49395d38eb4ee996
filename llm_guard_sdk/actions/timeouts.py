"""Stream timeouts: close streams stuck waiting too long, or open too long."""

from __future__ import annotations

import time
from typing import Protocol

from llm_guard_sdk.actions.progress import StreamProgress
from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import CloseReason, Session, SessionStream


class ChunkLimits(Protocol):
    """Per-stream chunk limits (the adaptive timeouts), asked once per stream per tick."""

    def begin_tick(self, now: float) -> None:
        """A tick starts: refresh what the limits rest on."""

    def limit(self, session: Session, stream: SessionStream, now: float,
              static: float | None) -> float | None:
        """Seconds ``stream`` may wait for its next chunk (``static`` when unknown), or None."""

    def end_tick(self, now: float) -> None:
        """The tick saw every open stream."""


class StreamTimeouts:
    """Closes streams waiting longer than ``chunk_timeout`` or older than ``stream_timeout``.

    The hot path reads no clock; a stream counts as stuck from the first sample that sees it
    waiting with an unchanged chunk count, so the timeout is precise to one sample interval.
    With :meth:`use_limits` (the adaptive timeouts) each stream's chunk limit comes from there
    instead, ``chunk_timeout`` being its fallback until the route has enough samples.

    Every tick visits every open stream through ``progress`` (the latency samples), even with
    no timeout configured: that visit is the one the latency figures rest on.

    Args:
        registry: Its streaming sessions are the ones checked.
        chunk_timeout: Seconds a consumer may wait for one chunk; None for no limit.
        stream_timeout: Seconds a stream may stay open; None for no limit.
        progress: The latency sampler to feed (the guard's); a private one when None.
    """

    def __init__(self, registry: SessionRegistry, *, chunk_timeout: float | None,
                 stream_timeout: float | None, progress: StreamProgress | None = None) -> None:
        self.registry = registry
        self.progress = progress if progress is not None else StreamProgress()
        self.chunk_timeout = chunk_timeout
        self.stream_timeout = stream_timeout
        self.limits: ChunkLimits | None = None
        self.closed_total = 0

    def use_limits(self, limits: ChunkLimits | None) -> None:
        """Ask ``limits`` for each stream's chunk limit (None: ``chunk_timeout`` for all)."""
        self.limits = limits

    async def run(self) -> int:
        """Check every open stream once; returns how many were asked to close."""
        chunk_timeout, stream_timeout, limits = self.chunk_timeout, self.stream_timeout, self.limits
        progress = self.progress
        enforce = chunk_timeout is not None or stream_timeout is not None or limits is not None
        now = time.monotonic()
        progress.begin_tick(now)
        if limits is not None:
            limits.begin_tick(now)
        closed = 0
        try:
            for session in list(self.registry.largest_streams()):
                for stream in session.streams:
                    progress.visit(session, stream, now)
                    if not enforce:
                        continue
                    limit = chunk_timeout if limits is None else limits.limit(
                        session, stream, now, chunk_timeout)
                    if not stream.waiting or stream.chunks != stream.stuck_chunks:
                        stream.stuck_chunks = stream.chunks if stream.waiting else -1
                        stream.stuck_since = now
                    stuck = now - stream.stuck_since if stream.stuck_chunks >= 0 else 0.0
                    if (limit is not None and stuck > limit) or (stream_timeout is not None
                                                                and now - stream.started_at
                                                                > stream_timeout):
                        await stream.request_close(CloseReason.TIMEOUT)
                        closed += 1
        finally:  # a tick left open would stop the sampling for good
            if limits is not None:
                limits.end_tick(now)
            progress.end_tick(now)
        self.closed_total += closed
        return closed
