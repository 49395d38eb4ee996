"""Admission projection: count the memory that sessions admitted since the last sample will take.

The level only changes on a sample, and a sample only sees memory already allocated. Sessions
admitted in between (a burst of connections accepted when the event loop comes back from a slow
tick) have not allocated yet: admission by level alone lets all of them in, and what they then
allocate is not stopped. The OOM-survival proof (docs/reliability.md) measured it: at 30 new
8 MiB conversations per second on a loaded machine, the guard's ticks at ``evict`` were
0.6-0.9 s apart (each ends with an eviction and the heap trim it asks for), the sampled
pressure sat just under ``shed_at`` (0.91 of 512 MiB) so every arrival was admitted, and up to
~27 conversations (over 200 MiB) arrived between two samples, where ``shed_at`` leaves 41 MiB.

So each admission *reserves* what a session is expected to hold, and admission projects the
pressure of the last sample plus every reservation made since: once the projection crosses a
class's bar (``shed_at`` for ``normal``), new sessions are refused until the next sample, which
sees what the admitted ones really took (Envoy's overload manager does the same with its
"reserved" resources). A session is expected to hold the most any of the recently measured
sessions held (:meth:`AdmissionProjection.observe`: attachment sizes and peaks at close), so the
projection costs nothing when sessions are small and stays off until a session was measured.
Pure counting: no clock, no I/O, O(1) per admission.
"""

from __future__ import annotations

from collections import deque

__all__ = ["DEFAULT_WINDOW", "AdmissionProjection"]

DEFAULT_WINDOW = 32
"""Measured sessions whose largest size is the expected size of the next one."""


class AdmissionProjection:
    """The last sample's usage plus the reservations of the sessions admitted since.

    Args:
        window: How many recent session sizes :meth:`observe` keeps; the largest is the
            expected size of a new session.
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window!r}")
        self._recent: deque[int] = deque(maxlen=window)
        self._largest = 0  # max(self._recent), kept so admission stays O(1)
        self.used_bytes = 0
        self.limit_bytes: int | None = None
        self.admitted_since_sample = 0
        """Sessions admitted since the last :meth:`sampled`; each reserves the expected size."""

    def sampled(self, used_bytes: int, limit_bytes: int | None) -> None:
        """A new sample of the deciding source: it sees what the admitted sessions took."""
        self.used_bytes = max(0, used_bytes)
        self.limit_bytes = limit_bytes if limit_bytes and limit_bytes > 0 else None
        self.admitted_since_sample = 0

    def observe(self, held_bytes: int) -> None:
        """A session was measured holding ``held_bytes`` (its attachments, or its peak at close)."""
        if held_bytes <= 0:
            return
        if len(self._recent) == self._recent.maxlen and self._recent[0] == self._largest:
            self._recent.popleft()  # the largest leaves the window: recompute once
            self._largest = max(self._recent, default=0)
        self._recent.append(held_bytes)
        self._largest = max(self._largest, held_bytes)

    @property
    def expected_session_bytes(self) -> int:
        """What a new session is expected to hold: the largest of the recent measurements."""
        return self._largest

    @property
    def reserved_bytes(self) -> int:
        """Bytes reserved by the sessions admitted since the last sample."""
        return self.admitted_since_sample * self._largest

    def admitted(self) -> None:
        """A session was admitted: it reserves :attr:`expected_session_bytes` until the sample."""
        self.admitted_since_sample += 1

    def projected_pressure(self, extra_sessions: int = 1) -> float | None:
        """Pressure once the admitted sessions and ``extra_sessions`` more hold their size.

        None when the limit is unknown or no session was measured yet (no projection).
        """
        if self.limit_bytes is None or self._largest == 0:
            return None
        sessions = self.admitted_since_sample + max(0, extra_sessions)
        return (self.used_bytes + sessions * self._largest) / self.limit_bytes

    def section(self) -> dict[str, int | float | None]:
        """Status figures: the expected size, what is reserved, the projection of one more."""
        projected = self.projected_pressure()
        return {"expected_session_bytes": self._largest,
                "admitted_since_sample": self.admitted_since_sample,
                "reserved_bytes": self.reserved_bytes,
                "projected_pressure": None if projected is None else round(projected, 4)}
