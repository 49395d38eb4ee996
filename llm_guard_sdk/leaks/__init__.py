"""Leak detection and forensics: what leaked, how much, and who still holds it.

* :class:`LeakSweeper` / :func:`enable_leak_sweeper` (or ``LLM_GUARD_LEAKS=1``): at runtime,
  everything a closed session owned must be gone ``leak_grace`` seconds later
  (:class:`LeakSettings`: ``LLM_GUARD_LEAK_GRACE``, ``LLM_GUARD_LOG_CONTENT``); survivors are
  reported with their reference chain, retained size and allocation site.
* :class:`HeapSnapshots` / :func:`enable_snapshots`: ``GET /llm-guard/snapshot`` and
  ``?diff=<id>`` (``llm-guard snapshot`` in a terminal).
* The pytest plugin (``llm_guard_sdk.pytest_plugin``, ``--llm-guard-leaks``) fails the test that
  introduced a leak.

objgraph and pympler (the ``leaks`` extra) are imported only when a leak is examined; without
them the tools still say what leaked and who holds it, and say that sizes and graphs are
unavailable.

Layout: :mod:`~llm_guard_sdk.leaks.runtime` runs in the served process (sweeper, heap diff,
tracking, forensics), :mod:`~llm_guard_sdk.leaks.testing` only under the pytest plugin. The
core never imports this package: :class:`LeakExtension` is enabled by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llm_guard_sdk.leaks.runtime.chains import Chain, find_chain
from llm_guard_sdk.leaks.runtime.forensics import Limits, retained_size
from llm_guard_sdk.leaks.runtime.heap_diff import HeapSnapshots, enable_snapshots
from llm_guard_sdk.leaks.runtime.sweeper import LeakSweeper, enable_leak_sweeper
from llm_guard_sdk.leaks.settings import LeakSettings

if TYPE_CHECKING:
    from llm_guard_sdk.guard import Guard


class LeakExtension:
    """The guard extension ``"leaks"``: the sweeper and the snapshot route on one guard.

    The core enables it by name (``"llm_guard_sdk.leaks:LeakExtension"``, when
    ``LLM_GUARD_LEAKS=1``) so that it never imports this package itself.
    """

    name = "leaks"

    def __init__(self, settings: LeakSettings | None = None) -> None:
        self.settings = settings

    def setup(self, guard: Guard) -> None:
        """Attach the sweeper (idempotent, like :func:`enable_leak_sweeper`)."""
        enable_leak_sweeper(guard, settings=self.settings)


__all__ = [
    "Chain",
    "HeapSnapshots",
    "LeakExtension",
    "LeakSettings",
    "LeakSweeper",
    "Limits",
    "enable_leak_sweeper",
    "enable_snapshots",
    "find_chain",
    "retained_size",
]
