"""Build the configured monitors and find the memory limit they are judged against."""

from __future__ import annotations

from collections.abc import Sequence

import psutil  # type: ignore[import-untyped,unused-ignore]

from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.monitors.base import SOURCE_NAMES, MemorySource
from llm_guard_sdk.monitors.cgroup import CgroupMemory, CgroupSource, find_memory_cgroup
from llm_guard_sdk.monitors.host import HostRAMSource
from llm_guard_sdk.monitors.process import ProcessRSSSource


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


def _limited_cgroup(root: str, proc_self_cgroup: str) -> tuple[CgroupMemory | None, int | None]:
    """This process's memory cgroup (if readable) and its limit (None when unlimited)."""
    cgroup = find_memory_cgroup(root, proc_self_cgroup)
    if cgroup is None:
        return None, None
    try:
        return cgroup, cgroup.limit_bytes()
    except OSError:
        return cgroup, None


def detect_limit(
    configured_limit: int | None,
    *,
    cgroup_root: str = "/sys/fs/cgroup",
    proc_self_cgroup: str = "/proc/self/cgroup",
) -> int | None:
    """The effective memory limit (configured, cgroup, host: the lowest), without any monitor.

    For a guard given its sources explicitly: status and heap trimming still judge RSS against
    the limit that kills the process.
    """
    _, cgroup_limit = _limited_cgroup(cgroup_root, proc_self_cgroup)
    return effective_limit(configured_limit, cgroup_limit, _host_total())


def build_monitors(
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
    cgroup, cgroup_limit = _limited_cgroup(cgroup_root, proc_self_cgroup)
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
