"""Build the configured monitors and find the memory limit they are judged against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import psutil  # type: ignore[import-untyped,unused-ignore]

from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.monitors.base import SOURCE_NAMES, MemorySource
from llm_guard_sdk.monitors.cgroup import CgroupMemory, CgroupSource, find_memory_cgroup
from llm_guard_sdk.monitors.host import HostRAMSource
from llm_guard_sdk.monitors.process import ProcessRSSSource


class Monitors(NamedTuple):
    """What :func:`build` found: the sources, the effective limit and where it comes from."""

    sources: list[MemorySource]
    limit: int | None
    limit_source: str
    """``configured``, ``cgroup``, ``host`` or ``""`` (no limit known)."""


def choose_limit(
    configured: int | None, cgroup_limit: int | None, host_total: int | None
) -> tuple[int | None, str]:
    """The tightest known ceiling and its origin; on a tie the configured one is named."""
    known = [(limit, origin) for limit, origin in (
        (configured, "configured"), (cgroup_limit, "cgroup"), (host_total, "host"))
        if limit is not None]
    if not known:
        return None, ""
    return min(known, key=lambda item: item[0])


def effective_limit(
    configured: int | None, cgroup_limit: int | None, host_total: int | None
) -> int | None:
    """Return the tightest known ceiling, since whichever is lowest is the one that kills us."""
    return choose_limit(configured, cgroup_limit, host_total)[0]


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


def find_limit(
    configured_limit: int | None,
    *,
    cgroup_root: str = "/sys/fs/cgroup",
    proc_self_cgroup: str = "/proc/self/cgroup",
) -> tuple[int | None, str]:
    """The effective memory limit and its origin (see :func:`choose_limit`), without monitors."""
    _, cgroup_limit = _limited_cgroup(cgroup_root, proc_self_cgroup)
    return choose_limit(configured_limit, cgroup_limit, _host_total())


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
    return find_limit(configured_limit, cgroup_root=cgroup_root,
                      proc_self_cgroup=proc_self_cgroup)[0]


def build_monitors(
    names: Sequence[str],
    configured_limit: int | None,
    *,
    cgroup_root: str = "/sys/fs/cgroup",
    proc_self_cgroup: str = "/proc/self/cgroup",
) -> tuple[list[MemorySource], int | None]:
    """:func:`build` without the limit's origin."""
    monitors = build(names, configured_limit, cgroup_root=cgroup_root,
                     proc_self_cgroup=proc_self_cgroup)
    return monitors.sources, monitors.limit


def build(
    names: Sequence[str],
    configured_limit: int | None,
    *,
    cgroup_root: str = "/sys/fs/cgroup",
    proc_self_cgroup: str = "/proc/self/cgroup",
) -> Monitors:
    """Build the named sources and the limit the process source is judged against.

    A cgroup without a limit is skipped because its pressure would always be None. Host RAM
    is only added when neither a limit is configured nor a cgroup limit exists: then the
    process's own limit is what matters, and other processes filling the machine (a browser on
    a laptop, a neighbour on a VM) must not push this app into eviction.

    Args:
        names: Any subset of ``SOURCE_NAMES`` in the order readings should be reported.
        configured_limit: An operator-set ceiling in bytes, or None.
        cgroup_root: Where cgroup filesystems are mounted; parameterised for tests.
        proc_self_cgroup: The membership file; parameterised for tests.

    Returns:
        The sources, the effective limit (the minimum of configured, cgroup and host) and its
        origin.

    Raises:
        ConfigError: A name is unknown; a ``ValueError`` so bad config fails at start-up.

    """
    unknown = [name for name in names if name not in SOURCE_NAMES]
    if unknown:
        raise ConfigError(
            f"unknown memory source(s) {unknown!r}; expected some of {list(SOURCE_NAMES)!r}"
        )
    cgroup, cgroup_limit = _limited_cgroup(cgroup_root, proc_self_cgroup)
    limit, origin = choose_limit(configured_limit, cgroup_limit, _host_total())

    sources: list[MemorySource] = []
    for name in dict.fromkeys(names):
        if name == "process":
            sources.append(ProcessRSSSource(limit))
        elif name == "cgroup" and cgroup is not None and cgroup_limit is not None:
            sources.append(CgroupSource(cgroup))
        elif name == "host" and cgroup_limit is None and configured_limit is None:
            sources.append(HostRAMSource())
    return Monitors(sources, limit, origin)
