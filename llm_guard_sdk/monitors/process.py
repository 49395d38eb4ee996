"""RSS of this process and its descendants."""

from __future__ import annotations

import time

import psutil  # type: ignore[import-untyped,unused-ignore]

from llm_guard_sdk.monitors.base import Reading

# Children can exit between listing and reading them; that is normal churn, not an error.
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


class ProcessRSSSource:
    """RSS of this process plus its descendants.

    Workers forked by the server (tokenizers, multiprocessing pools) are charged to the same
    cgroup, so ignoring them would under-report. Shared copy-on-write pages are counted once per
    process, which over-reports slightly; that errs on the safe side.
    """

    def __init__(
        self,
        limit_bytes: int | None,
        *,
        include_children: bool = True,
        pid: int | None = None,
        children_refresh: float = 2.0,
    ) -> None:
        self.name = "process"
        self.limit_bytes = limit_bytes
        self._include_children = include_children
        # Kept across reads: psutil caches per-process state and rebuilding costs a /proc scan.
        self._process = psutil.Process(pid)
        # Finding descendants scans all of /proc (~1 ms on a busy host), so the list is
        # refreshed every ``children_refresh`` seconds, or at once when a child vanished;
        # their RSS is still read on every sample.
        self._children_refresh = children_refresh
        self._children: list[psutil.Process] = []
        self._children_at = float("-inf")

    def _descendants(self) -> list[psutil.Process]:
        now = time.monotonic()
        if now - self._children_at >= self._children_refresh:
            self._children = self._process.children(recursive=True)
            self._children_at = now
        return self._children

    def read(self) -> Reading:
        """Sample RSS now; raises OSError if the watched process itself is gone."""
        try:
            self_rss = int(self._process.memory_info().rss)
            children = self._descendants() if self._include_children else []
        except psutil.Error as exc:
            raise OSError(f"cannot read process {self._process.pid}: {exc}") from exc
        children_rss = 0
        counted = 0
        for child in children:
            try:
                children_rss += int(child.memory_info().rss)
            except _GONE:
                self._children_at = float("-inf")  # rescan next time
                continue
            counted += 1
        return Reading(
            name=self.name,
            used_bytes=self_rss + children_rss,
            limit_bytes=self.limit_bytes,
            detail={
                "self_rss_bytes": self_rss,
                "children_rss_bytes": children_rss,
                "children": counted,
            },
        )
