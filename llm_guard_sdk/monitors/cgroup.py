"""Find and read this process's memory cgroup.

The cgroup is what the kernel OOM killer and the kubelet enforce, so its numbers are the ones
that decide whether the server survives; host-wide figures are only a fallback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from llm_guard_sdk.monitors.base import Reading

# cgroup v1 reports "unlimited" as PAGE_COUNTER_MAX rounded to the page size
# (9223372036854771712 on x86-64); anything this large can never be a real limit.
_UNLIMITED_THRESHOLD = 2**62

_V1_USAGE = "memory.usage_in_bytes"
_V1_LIMIT = "memory.limit_in_bytes"
_V2_USAGE = "memory.current"
_V2_LIMIT = "memory.max"
_STAT = "memory.stat"


def _read_text(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as fh:
        return fh.read().strip()


def _parse_int(raw: str, path: str) -> int:
    """Report garbage as OSError so callers (and the sampler) handle a single error type."""
    try:
        return int(raw)
    except ValueError as exc:
        raise OSError(f"unparseable value {raw!r} in {path}") from exc


def _read_int(path: str) -> int:
    return _parse_int(_read_text(path), path)


def _as_limit(value: int) -> int | None:
    return None if value >= _UNLIMITED_THRESHOLD else value


@dataclass(frozen=True)
class CgroupMemory:
    """A memory cgroup directory; every call re-reads the files because they change constantly.

    Attributes:
        version: 1 or 2, which selects the file names and stat keys.
        path: Directory of the process's memory cgroup as seen from this mount namespace.
        root: The cgroup mount it lives under; on v2 the limits of the ancestors up to it
            apply too (``""``: only ``path`` itself is looked at).

    """

    version: int
    path: str
    root: str = ""

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def _stat(self) -> dict[str, int]:
        stats: dict[str, int] = {}
        for line in _read_text(self._file(_STAT)).splitlines():
            key, _, value = line.partition(" ")
            try:
                stats[key] = int(value)
            except ValueError:
                continue  # Unknown or non-numeric keys must not hide the ones we need.
        return stats

    def usage_bytes(self) -> int:
        """Return total charged memory, page cache included."""
        return _read_int(self._file(_V2_USAGE if self.version == 2 else _V1_USAGE))

    def ancestors(self) -> list[CgroupMemory]:
        """This cgroup and its parents up to the mount root, innermost first."""
        chain = [self]
        if not self.root:
            return chain
        root, current = os.path.normpath(self.root), os.path.normpath(self.path)
        while current != root:
            parent = os.path.dirname(current)
            if parent == current or os.path.commonpath([root, parent]) != root:
                break
            current = parent
            chain.append(CgroupMemory(self.version, current))
        return chain

    def _own_v2_limit(self) -> int | None:
        path = self._file(_V2_LIMIT)
        raw = _read_text(path)
        return None if raw == "max" else _as_limit(_parse_int(raw, path))

    def limiting(self) -> tuple[CgroupMemory, int | None]:
        """The cgroup whose hard limit is the smallest (itself or an ancestor), and that limit.

        On v2 every ancestor's ``memory.max`` applies (a pod or a systemd slice often carries
        the real limit while the container's own is ``max``); an ancestor without the file (the
        root) has none. Errors reading this cgroup's own file propagate as OSError.
        """
        if self.version != 2:
            return self, self._v1_limit()
        best: tuple[CgroupMemory, int | None] = (self, self._own_v2_limit())
        for ancestor in self.ancestors()[1:]:
            try:
                limit = ancestor._own_v2_limit()
            except OSError:
                continue  # no memory.max there (root, controller not enabled): no limit
            if limit is not None and (best[1] is None or limit < best[1]):
                best = (ancestor, limit)
        return best

    def limit_bytes(self) -> int | None:
        """Return the hard limit that applies, or None when effectively unlimited.

        On v2 the smallest ``memory.max`` of this cgroup and its ancestors (:meth:`limiting`).
        On v1 a parent's limit also applies when hierarchy accounting is on, and the kernel
        exposes that as ``hierarchical_memory_limit``; the tighter of the two is what kills us.
        """
        return self.limiting()[1]

    def _v1_limit(self) -> int | None:
        limits = [_as_limit(_read_int(self._file(_V1_LIMIT)))]
        try:
            hierarchical = self._stat().get("hierarchical_memory_limit")
        except OSError:
            hierarchical = None
        if hierarchical is not None:
            limits.append(_as_limit(hierarchical))
        real = [limit for limit in limits if limit is not None]
        return min(real) if real else None

    def inactive_file_bytes(self) -> int:
        """Return reclaimable page cache, which the kernel drops before it OOM-kills."""
        stats = self._stat()
        keys = ("inactive_file",) if self.version == 2 else ("total_inactive_file", "inactive_file")
        for key in keys:
            if key in stats:
                return stats[key]
        return 0

    def working_set_bytes(self) -> int:
        """Return usage minus inactive file cache, the figure the kubelet evicts on."""
        return max(0, self.usage_bytes() - self.inactive_file_bytes())


def _usable(directory: str, usage_file: str) -> bool:
    try:
        _read_int(os.path.join(directory, usage_file))
    except OSError:
        return False
    return True


def _walk_up(mount: str, cgroup_path: str, usage_file: str) -> str | None:
    """Find the deepest existing cgroup directory along the path.

    With cgroup namespaces (or a container that mounts only its own subtree) the path from
    /proc/self/cgroup often does not exist under the mount, while a parent or the mount root
    is in fact our cgroup.
    """
    rel = os.path.normpath("/" + cgroup_path).lstrip("/")
    parts = [part for part in rel.split("/") if part and part != ".."]
    for depth in range(len(parts), -1, -1):
        candidate = os.path.join(mount, *parts[:depth])
        if _usable(candidate, usage_file):
            return candidate
    return None


def _v1_mounts(root: str, controllers: str) -> list[str]:
    """List where the v1 memory hierarchy may be mounted.

    Distributions mount it as ``memory``, as a combined ``cpu,memory``-style directory (with
    symlinks), or a container may mount the memory hierarchy straight at the root.
    """
    candidates = [os.path.join(root, "memory"), os.path.join(root, controllers), root]
    return list(dict.fromkeys(candidates))


def find_memory_cgroup(
    root: str = "/sys/fs/cgroup", proc_self_cgroup: str = "/proc/self/cgroup"
) -> CgroupMemory | None:
    """Locate this process's memory cgroup, or return None when none is readable.

    On hybrid hosts the v1 memory controller is preferred because the unified v2 tree there
    carries no memory controller, so v2 is only the fallback.

    Args:
        root: Where the cgroup filesystems are mounted.
        proc_self_cgroup: The membership file, parameterised so tests can fake it.

    Returns:
        The cgroup, or None when there is none we can read (then host RAM is the fallback).

    """
    try:
        text = _read_text(proc_self_cgroup)
    except OSError:
        return None
    v1: tuple[str, str] | None = None
    v2_path: str | None = None
    for line in text.splitlines():
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0" and not controllers:
            v2_path = path
        elif "memory" in controllers.split(","):
            v1 = (controllers, path)
    if v1 is not None:
        controllers, path = v1
        for mount in _v1_mounts(root, controllers):
            found = _walk_up(mount, path, _V1_USAGE)
            if found is not None:
                return CgroupMemory(version=1, path=found, root=mount)
    if v2_path is not None:
        for mount in (root, os.path.join(root, "unified")):
            if os.path.isfile(os.path.join(mount, "cgroup.controllers")):
                found = _walk_up(mount, v2_path, _V2_USAGE)
                if found is not None:
                    return CgroupMemory(version=2, path=found, root=mount)
    return None


class CgroupSource:
    """The container's working set against its cgroup limit, as the OOM killer sees it."""

    def __init__(self, cgroup: CgroupMemory) -> None:
        self.name = "cgroup"
        self.cgroup = cgroup

    def read(self) -> Reading:
        """Sample the cgroup whose limit applies; file errors propagate as OSError.

        When the tightest limit is an ancestor's (a pod, a slice), its usage is what is charged
        against it, siblings included, so that level's usage is the one read.
        """
        level, limit = self.cgroup.limiting()
        usage = level.usage_bytes()
        inactive = level.inactive_file_bytes()
        return Reading(
            name=self.name,
            # Inactive page cache is reclaimed before an OOM kill, so it is not pressure.
            used_bytes=max(0, usage - inactive),
            limit_bytes=limit,
            detail={
                "usage_bytes": usage,
                "inactive_file_bytes": inactive,
                "version": self.cgroup.version,
                "limit_path": level.path,
            },
        )
