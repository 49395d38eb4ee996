"""Leak detection and forensics: what leaked, how much, and who still holds it.

* :class:`LeakSweeper` / :func:`enable_leak_sweeper` (or ``LLM_GUARD_LEAKS=1``): at runtime,
  everything a closed session owned must be gone ``leak_grace`` seconds later; survivors are
  reported with their reference chain, retained size and allocation site.
* :class:`HeapSnapshots` / :func:`enable_snapshots`: ``GET /llm-guard/snapshot`` and
  ``?diff=<id>`` (``llm-guard snapshot`` in a terminal).
* The pytest plugin (``llm_guard_sdk.pytest_plugin``, ``--llm-guard-leaks``) fails the test that
  introduced a leak.

objgraph and pympler (the ``leaks`` extra) are imported only when a leak is examined; without
them the tools still say what leaked, and say that chains and sizes are unavailable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_guard_sdk.leaks.chains import Chain, find_chain
from llm_guard_sdk.leaks.forensics import Limits, retained_size
from llm_guard_sdk.leaks.snapshot import HeapSnapshots, enable_snapshots
from llm_guard_sdk.leaks.sweeper import LeakSweeper, enable_leak_sweeper

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard


class LeakExtension:
    """The ``leaks`` extension (``LLM_GUARD_LEAKS=1``): the sweeper and the snapshot endpoint."""

    name = "leaks"

    def setup(self, guard: Guard) -> None:
        """Attach the sweeper (idempotent)."""
        enable_leak_sweeper(guard)


__all__ = [
    "Chain",
    "HeapSnapshots",
    "LeakExtension",
    "LeakSweeper",
    "Limits",
    "enable_leak_sweeper",
    "enable_snapshots",
    "find_chain",
    "retained_size",
]
