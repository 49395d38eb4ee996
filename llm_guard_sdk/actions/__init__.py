"""Actions the guard takes on what the monitors and the policy report.

Each is an object built from what it needs (the session registry, readings, settings), never
from the whole guard, so it can be tested and reasoned about on its own:

* :class:`Admission`: refuse new sessions under pressure (by priority class, :class:`ShedLadder`),
  at capacity, or over a tenant's caps (429, ``tenant_quota``);
* :class:`Evictor`: close idle then largest sessions at the evict level, lowest priority class
  first, and idle timeouts;
* :class:`StreamTimeouts`: close streams stuck past ``chunk_timeout``/``stream_timeout``, or
  past the per-route limits of :class:`AdaptiveTimeouts` (the ``"timeouts"`` extension);
* :class:`DeadPeers`: close sessions whose send to the client stalled past ``send_timeout``;
* :class:`HeapTrimmer`: give freed pages back to the OS after evictions;
* :class:`SnapshotRing`: record what the process looked like on reaching warn.
"""

from llm_guard_sdk.actions.adaptive import AdaptiveTimeouts, AdaptiveTimeoutSettings
from llm_guard_sdk.actions.admission import (
    QUOTA_REASONS,
    TENANT_QUOTA,
    Admission,
    AdmissionCheck,
    ShedLadder,
)
from llm_guard_sdk.actions.dead_peers import DeadPeers, SendWatch
from llm_guard_sdk.actions.evict import CloseSession, Evictor
from llm_guard_sdk.actions.heap import HeapTrimmer, load_malloc_trim
from llm_guard_sdk.actions.snapshots import SnapshotRing, tracemalloc_top
from llm_guard_sdk.actions.timeouts import ChunkLimits, StreamTimeouts

__all__ = [
    "QUOTA_REASONS",
    "TENANT_QUOTA",
    "AdaptiveTimeoutSettings",
    "AdaptiveTimeouts",
    "Admission",
    "AdmissionCheck",
    "ChunkLimits",
    "CloseSession",
    "DeadPeers",
    "Evictor",
    "HeapTrimmer",
    "SendWatch",
    "ShedLadder",
    "SnapshotRing",
    "StreamTimeouts",
    "load_malloc_trim",
    "tracemalloc_top",
]
