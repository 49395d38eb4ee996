"""Stream progress: time to first token and inter-chunk gaps, sampled on the tick.

The one place that turns "how many chunks did each stream produce" into latencies, shared by
the adaptive timeouts (per-route limits), the Prometheus histograms and the ``latency`` status
section, so each stream is tracked once per tick whoever listens.

**Why on the tick.** The hot path (``GuardedStream.__anext__``) reads no clock and is not
touched. The sampler tick already visits every open stream to enforce timeouts; it notes how
many chunks each produced since the previous tick and derives the latencies at tick resolution:
the chunks that arrived in one tick share its time evenly, and the rest of the time since the
stream's previous progress goes to the first of them (the gap that ended a stall, or the first
token). The samples of a stream thus add up to its elapsed time, long stalls are measured to
one tick, and gaps shorter than a tick are averaged. A stream that opens and ends between two
ticks is not sampled; the rest of a stream after its last tick neither.

Listeners (:class:`ProgressListener`) get each stream's samples of a tick as one call: the
*lead* sample (a first token, or the gap that ended the previous progress) and ``repeats``
more gaps of ``share`` seconds each, so a weighted histogram adds them in O(1).
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol

from llm_guard_sdk.actions.latency import RollingQuantile
from llm_guard_sdk.session import Session, SessionStream

__all__ = ["ProgressListener", "StreamProgress", "StreamTrack"]

QUANTILE = 0.99
WINDOW = 300.0
"""Seconds per window of the ``latency`` status section (it covers one to two windows)."""


class ProgressListener(Protocol):
    """Told about every stream's progress on every tick (the adaptive timeouts, metrics)."""

    def track(self, session: Session, stream: SessionStream, now: float) -> object:
        """A stream is seen for the first time: return what to keep for it (or None)."""

    def record(self, state: Any, lead: float, first_token: bool, share: float,
               repeats: int) -> None:
        """One stream's samples of one tick.

        ``lead`` seconds (a first token if ``first_token``, else a gap), then ``repeats`` gaps
        of ``share`` seconds; ``state`` is what :meth:`track` returned for the stream.
        """


class StreamTrack:
    """Per-stream bookkeeping between ticks; ``stream`` is weak, never keeping a stream alive.

    ``state`` holds each listener's own per-stream value, keyed by the listener.
    """

    __slots__ = ("chunks", "progress_at", "seen", "state", "stream")

    def __init__(self, stream: SessionStream, started_at: float) -> None:
        self.stream = weakref.ref(stream)
        self.chunks = 0
        self.progress_at = started_at
        self.seen = -1
        self.state: dict[object, Any] = {}


class StreamProgress:
    """Visits each open stream once per tick and turns its chunk count into latency samples.

    Always on in the guard (``guard.progress``): :class:`~llm_guard_sdk.actions.StreamTimeouts`
    visits every open stream through it on every tick. It keeps a rolling P99 of both
    latencies for the ``latency`` status section and forwards each sample to its listeners.

    Args:
        window: Seconds per window of the status quantiles.
    """

    def __init__(self, window: float = WINDOW, *, now: float = 0.0) -> None:
        self.first_token = RollingQuantile(window, low=1e-3, high=1e3, now=now)
        self.inter_chunk = RollingQuantile(window, low=1e-3, high=1e3, now=now)
        self.listeners: list[ProgressListener] = []
        # By id, checked against a weak reference: cheaper per tick than a WeakKeyDictionary
        # (no weakref built per lookup), and an ended stream is never kept alive.
        self._streams: dict[int, StreamTrack] = {}
        self._generation = 0
        self._previous_tick = float("-inf")
        self._in_tick = False

    @property
    def tracked(self) -> int:
        """Streams seen by the last ticks and still open then."""
        return len(self._streams)

    def add_listener(self, listener: ProgressListener) -> None:
        """Forward every sample to ``listener`` from now on (once per listener)."""
        if listener not in self.listeners:
            self.listeners.append(listener)

    def begin_tick(self, now: float) -> None:
        """A tick starts: age the status windows; the streams it visits are sampled once.

        A no-op while a tick is open (the timeouts and the adaptive limits both announce it).
        """
        if self._in_tick:
            return
        self._in_tick = True
        self._generation += 1
        self.first_token.rotate(now)
        self.inter_chunk.rotate(now)

    def visit(self, session: Session, stream: SessionStream, now: float) -> StreamTrack:
        """Record what ``stream`` did since the last tick; once per tick (later calls: no-op)."""
        track = self._streams.get(id(stream))
        if track is None or track.stream() is not stream:
            track = self._streams[id(stream)] = StreamTrack(stream, stream.started_at)
            for listener in self.listeners:
                track.state[listener] = listener.track(session, stream, now)
        if track.seen == self._generation:
            return track
        track.seen = self._generation
        chunks = stream.chunks
        arrived = chunks - track.chunks
        if arrived > 0:
            # The chunks of one tick share its time; the first gets the rest since the last
            # progress (the first token, or the gap that ended a stall).
            span = now - track.progress_at
            share = (now - max(self._previous_tick, track.progress_at)) / arrived
            lead = span - (arrived - 1) * share
            first_token = track.chunks == 0
            (self.first_token if first_token else self.inter_chunk).add(lead)
            if arrived > 1:
                self.inter_chunk.add(share, arrived - 1)
            for listener in self.listeners:
                listener.record(track.state.get(listener), lead, first_token, share, arrived - 1)
            track.chunks, track.progress_at = chunks, now
        return track

    def end_tick(self, now: float) -> None:
        """Forget streams the tick did not see (they ended); a no-op when no tick is open."""
        if not self._in_tick:
            return
        self._in_tick = False
        self._previous_tick = now
        generation = self._generation
        if any(t.seen != generation for t in self._streams.values()):
            self._streams = {k: t for k, t in self._streams.items() if t.seen == generation}

    def section(self) -> dict[str, Any]:
        """The ``latency`` status section: P99s over the last one to two windows (None: none)."""
        first, gaps = self.first_token.quantile(QUANTILE), self.inter_chunk.quantile(QUANTILE)
        return {
            "first_token_p99_seconds": None if first is None else round(first, 4),
            "inter_chunk_p99_seconds": None if gaps is None else round(gaps, 4),
            "samples": self.first_token.count + self.inter_chunk.count,
        }
