"""The live dashboard (``GET /llm-guard/dashboard``): memory, level, sessions and counters.

The built-in extension ``"dashboard"`` (on by default; ``LLM_GUARD_DASHBOARD=0`` turns it off)
serves one self-contained page whose script reads a server-sent-events feed from the guard.
See docs/dashboard.md.
"""

from llm_guard_sdk.dashboard.extension import FEED_ROUTE, PAGE_ROUTE, Dashboard
from llm_guard_sdk.dashboard.feed import SnapshotFeed, Subscription, sse_event
from llm_guard_sdk.dashboard.history import MemoryHistory, make_point
from llm_guard_sdk.dashboard.page import CONTENT_SECURITY_POLICY
from llm_guard_sdk.dashboard.snapshot import build_snapshot, id_prefix, top_sessions

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "FEED_ROUTE",
    "PAGE_ROUTE",
    "Dashboard",
    "MemoryHistory",
    "SnapshotFeed",
    "Subscription",
    "build_snapshot",
    "id_prefix",
    "make_point",
    "sse_event",
    "top_sessions",
]
