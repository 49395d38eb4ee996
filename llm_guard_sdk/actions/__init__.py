"""Actions the guard takes on what the monitors and the policy report.

Each is an object built from what it needs (the session registry, readings, settings), never
from the whole guard, so it can be tested and reasoned about on its own:

* :class:`Admission`: refuse new sessions (shed) at the shed level or at capacity;
* :class:`Evictor`: close idle then largest sessions at the evict level, and idle timeouts;
* :class:`StreamTimeouts`: close streams stuck past ``chunk_timeout``/``stream_timeout``, or
  past the per-route limits of :class:`AdaptiveTimeouts` (the ``"timeouts"`` extension);
* :class:`DeadPeers`: close sessions whose send to the client stalled past ``send_timeout``;
* :class:`HeapTrimmer`: give freed pages back to the OS after evictions;
* :class:`SnapshotRing`: record what the process looked like on reaching warn.
"""

from llm_guard_sdk.actions.adaptive import AdaptiveTimeouts, AdaptiveTimeoutSettings
from llm_guard_sdk.actions.admission import Admission, AdmissionCheck
from llm_guard_sdk.actions.dead_peers import DeadPeers, SendWatch
from llm_guard_sdk.actions.evict import CloseSession, Evictor
from llm_guard_sdk.actions.heap import HeapTrimmer, load_malloc_trim
from llm_guard_sdk.actions.snapshots import SnapshotRing, tracemalloc_top
from llm_guard_sdk.actions.timeouts import ChunkLimits, StreamTimeouts

__all__ = [
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
    "SnapshotRing",
    "StreamTimeouts",
    "load_malloc_trim",
    "tracemalloc_top",
]
