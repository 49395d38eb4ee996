"""Memory sources the sampler polls to compute pressure.

The interface is deliberately tiny (a name and a synchronous ``read``) so that later sources
such as a vLLM KV cache or GPU memory plug in without touching the sampler or the policy.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import psutil  # type: ignore[import-untyped,unused-ignore]

from llm_guard_sdk.cgroup import CgroupMemory, find_memory_cgroup
from llm_guard_sdk.errors import ConfigError

SOURCE_NAMES = ("process", "cgroup", "host")

# Children can exit between listing and reading them; that is normal churn, not an error.
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


@dataclass(frozen=True, slots=True)
class Reading:
    """One sample of one source; frozen so the policy can hold it without copying.

    Attributes:
        name: The source that produced it, so the policy can say what tripped.
        used_bytes: Memory in use as the source counts it.
        limit_bytes: The ceiling that matters, or None when the source has none.
        detail: Small source-specific extras for logs and metrics (e.g. children RSS).

    """

    name: str
    used_bytes: int
    limit_bytes: int | None
    detail: Mapping[str, float | int | str] = field(default_factory=dict)

    @property
    def pressure(self) -> float | None:
        """Return used/limit, or None so sources without a ceiling never trigger the policy."""
        if not self.limit_bytes or self.limit_bytes <= 0:
            return None
        return self.used_bytes / self.limit_bytes


class MemorySource(Protocol):
    """Anything the sampler can poll every tick.

    ``read`` runs on the sampler's hot path, so it must be cheap and synchronous. Expected
    conditions must not raise; transient failures raise ``OSError``, which the sampler
    tolerates, so one bad read does not stop sampling.
    """

    @property
    def name(self) -> str:
        """Return the stable label used in readings, logs and metrics."""
        ...

    def read(self) -> Reading:
        """Return a fresh sample."""
        ...


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


class CgroupSource:
    """The container's working set against its cgroup limit, as the OOM killer sees it."""

    def __init__(self, cgroup: CgroupMemory) -> None:
        self.name = "cgroup"
        self.cgroup = cgroup

    def read(self) -> Reading:
        """Sample the cgroup; file errors propagate as OSError for the sampler to absorb."""
        usage = self.cgroup.usage_bytes()
        inactive = self.cgroup.inactive_file_bytes()
        return Reading(
            name=self.name,
            # Inactive page cache is reclaimed before an OOM kill, so it is not pressure.
            used_bytes=max(0, usage - inactive),
            limit_bytes=self.cgroup.limit_bytes(),
            detail={
                "usage_bytes": usage,
                "inactive_file_bytes": inactive,
                "version": self.cgroup.version,
            },
        )


class HostRAMSource:
    """Whole-machine RAM, the last resort when no cgroup limit bounds the process."""

    def __init__(self) -> None:
        self.name = "host"

    def read(self) -> Reading:
        """Sample host memory; "available" already excludes reclaimable cache."""
        vm = psutil.virtual_memory()
        total = int(vm.total)
        available = int(vm.available)
        return Reading(
            name=self.name,
            used_bytes=max(0, total - available),
            limit_bytes=total,
            detail={"available_bytes": available},
        )


def effective_limit(
    configured: int | None, cgroup_limit: int | None, host_total: int | None
) -> int | None:
    """Return the tightest known ceiling, since whichever is lowest is the one that kills us."""
    known = [limit for limit in (configured, cgroup_limit, host_total) if limit is not None]
    return min(known) if known else None


def _host_total() -> int | None:
    try:
        return int(psutil.virtual_memory().total)
    except (OSError, psutil.Error):
        return None


def build_sources(
    names: Sequence[str],
    configured_limit: int | None,
    *,
    cgroup_root: str = "/sys/fs/cgroup",
    proc_self_cgroup: str = "/proc/self/cgroup",
) -> tuple[list[MemorySource], int | None]:
    """Build the named sources and the limit the process source is judged against.

    A cgroup without a limit is skipped because its pressure would always be None, and host
    RAM is only added when no cgroup limit exists, since inside a limited container host
    figures are misleading.

    Args:
        names: Any subset of ``SOURCE_NAMES`` in the order readings should be reported.
        configured_limit: An operator-set ceiling in bytes, or None.
        cgroup_root: Where cgroup filesystems are mounted; parameterised for tests.
        proc_self_cgroup: The membership file; parameterised for tests.

    Returns:
        The sources and the effective limit (the minimum of configured, cgroup and host).

    Raises:
        ConfigError: A name is unknown; a ``ValueError`` so bad config fails at start-up.

    """
    unknown = [name for name in names if name not in SOURCE_NAMES]
    if unknown:
        raise ConfigError(
            f"unknown memory source(s) {unknown!r}; expected some of {list(SOURCE_NAMES)!r}"
        )
    cgroup = find_memory_cgroup(cgroup_root, proc_self_cgroup)
    cgroup_limit: int | None = None
    if cgroup is not None:
        try:
            cgroup_limit = cgroup.limit_bytes()
        except OSError:
            cgroup_limit = None
    limit = effective_limit(configured_limit, cgroup_limit, _host_total())

    sources: list[MemorySource] = []
    for name in dict.fromkeys(names):
        if name == "process":
            sources.append(ProcessRSSSource(limit))
        elif name == "cgroup" and cgroup is not None and cgroup_limit is not None:
            sources.append(CgroupSource(cgroup))
        elif name == "host" and cgroup_limit is None:
            sources.append(HostRAMSource())
    return sources, limit
