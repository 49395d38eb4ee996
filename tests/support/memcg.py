"""A real memory cgroup (v1 or v2) for the OOM-survival proof: create, limit, run in, destroy.

Unlike ``tests/support/cgroup.py`` (a fake tree for unit tests), this writes to the kernel's
cgroup filesystem, so the limit is enforced by the kernel and a process over it is OOM-killed.
It needs root (or a delegated subtree) and a memory controller:

* v1 (``/sys/fs/cgroup/memory``): the child is made *inside the caller's own memory cgroup*, so
  whatever limit the host set on us still applies above it (``use_hierarchy``); files
  ``memory.limit_in_bytes``, ``memory.max_usage_in_bytes``, ``memory.failcnt`` and the
  ``oom_kill`` line of ``memory.oom_control``. Swap is closed with ``memory.memsw.limit_in_bytes``
  when the kernel has it, or the process would swap instead of being killed.
* v2 (unified mount): a v2 cgroup that holds processes cannot enable controllers for its
  children, so the child is made under the mount root, which may; files ``memory.max``,
  ``memory.peak`` (kernel 5.19+), the ``max`` and ``oom_kill`` lines of ``memory.events``;
  ``memory.swap.max`` is set to 0.

:func:`unavailable_reason` says exactly why a cgroup cannot be made here (not Linux, no memory
controller, no permission), so tests skip with that reason rather than silently.
:meth:`MemoryCgroup.wrap` prefixes a command line with a tiny ``sh`` wrapper that moves itself
into the cgroup and then ``exec``\\s the command, so every byte the program allocates, from its
first import, is charged there and its pid is the one ``Popen`` returns.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")


class CgroupUnavailable(RuntimeError):
    """No memory cgroup can be made here; the message says why (tests skip with it)."""


def _read(path: Path) -> str:
    return path.read_text(encoding="ascii", errors="replace").strip()


def _keyed(path: Path) -> dict[str, int]:
    """``key value`` lines (``memory.events``, ``memory.oom_control``) as a dict."""
    values: dict[str, int] = {}
    for line in _read(path).splitlines():
        key, _, raw = line.partition(" ")
        with contextlib.suppress(ValueError):
            values[key] = int(raw)
    return values


@dataclass(frozen=True)
class Hierarchy:
    """Where new memory cgroups go on this host: cgroup version and parent directory."""

    version: int
    parent: Path


def _own_path(controller_match: str | None) -> str | None:
    """This process's cgroup path in the v1 hierarchy holding ``controller_match``, or v2's."""
    with contextlib.suppress(OSError):
        for line in _read(PROC_SELF_CGROUP).splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            hierarchy, controllers, path = parts
            if controller_match is None and hierarchy == "0" and not controllers:
                return path
            if controller_match is not None and controller_match in controllers.split(","):
                return path
    return None


def find_hierarchy(root: Path = CGROUP_ROOT) -> Hierarchy:
    """The v1 memory hierarchy (preferred: a hybrid host's v2 tree has no memory controller) or
    a v2 mount whose root offers ``memory``; :class:`CgroupUnavailable` saying why otherwise."""
    if not Path("/proc/self/cgroup").exists():
        raise CgroupUnavailable("no /proc/self/cgroup: not Linux, or /proc is not mounted")
    v1_mount = root / "memory"
    if (v1_mount / "memory.limit_in_bytes").exists():
        own = _own_path("memory") or "/"
        parent = v1_mount / own.lstrip("/")
        return Hierarchy(1, parent if parent.is_dir() else v1_mount)
    for mount in (root, root / "unified"):
        controllers = mount / "cgroup.controllers"
        if controllers.exists() and "memory" in _read(controllers).split():
            return Hierarchy(2, mount)
    raise CgroupUnavailable(f"no memory cgroup controller under {root} (v1 {v1_mount} missing, "
                            "and no v2 mount lists 'memory' in cgroup.controllers)")


def unavailable_reason(root: Path = CGROUP_ROOT) -> str | None:
    """Why a limited memory cgroup cannot be made here (a probe is made and removed), or None."""
    try:
        with memory_cgroup(64 * 2**20, name_prefix="llm-guard-probe", root=root):
            pass
    except CgroupUnavailable as exc:
        return str(exc)
    return None


class MemoryCgroup:
    """One child memory cgroup with a hard limit; read its counters, run commands in it."""

    def __init__(self, hierarchy: Hierarchy, path: Path, limit_bytes: int) -> None:
        self.version = hierarchy.version
        self.path = path
        self.limit_bytes = limit_bytes

    @classmethod
    def create(cls, limit_bytes: int, *, name: str | None = None,
               root: Path = CGROUP_ROOT) -> MemoryCgroup:
        """Make the cgroup and set its limit; :class:`CgroupUnavailable` with the reason."""
        hierarchy = find_hierarchy(root)
        path = hierarchy.parent / (name or f"llm-guard-oom-{uuid.uuid4().hex[:8]}")
        try:
            if hierarchy.version == 2:
                _enable_memory(hierarchy.parent)
            path.mkdir()
        except OSError as exc:
            raise CgroupUnavailable(
                f"cannot create memory cgroup {path}: {exc.strerror or exc} (needs root or a "
                "delegated cgroup subtree)") from exc
        cgroup = cls(hierarchy, path, limit_bytes)
        try:
            cgroup._set_limit(limit_bytes)
        except OSError as exc:
            cgroup.destroy()
            raise CgroupUnavailable(f"cannot set the memory limit of {path}: "
                                    f"{exc.strerror or exc}") from exc
        return cgroup

    def _set_limit(self, limit_bytes: int) -> None:
        if self.version == 1:
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            memsw = self.path / "memory.memsw.limit_in_bytes"
            if memsw.exists():  # no swapping out of the limit: over it, the kernel kills
                memsw.write_text(str(limit_bytes))
        else:
            (self.path / "memory.max").write_text(str(limit_bytes))
            swap = self.path / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def wrap(self, command: Sequence[str]) -> list[str]:
        """``command`` run inside this cgroup: ``sh`` joins it, then ``exec``\\s the command."""
        script = 'echo $$ > "$0" && exec "$@"'
        return ["/bin/sh", "-c", script, str(self.procs_file), *command]

    def add(self, pid: int) -> None:
        """Move a running process in (memory it already holds stays charged where it was)."""
        self.procs_file.write_text(str(pid))

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(p) for p in _read(self.procs_file).split()]
        return []

    def usage_bytes(self) -> int:
        """Memory charged now, page cache included (what the limit is enforced on)."""
        name = "memory.usage_in_bytes" if self.version == 1 else "memory.current"
        return int(_read(self.path / name))

    def peak_bytes(self) -> int | None:
        """The high-water mark of the charge since creation (None: kernel without memory.peak)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        with contextlib.suppress(FileNotFoundError):
            return int(_read(self.path / name))
        return None

    def oom_kills(self) -> int:
        """Processes the kernel OOM-killed in this cgroup (``oom_kill``; kernel 4.13+)."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        counters = _keyed(self.path / name)
        if "oom_kill" not in counters:
            raise CgroupUnavailable(f"{self.path / name} has no oom_kill counter (kernel < 4.13)")
        return counters["oom_kill"]

    def limit_hits(self) -> int:
        """Times the charge hit the limit (v1 ``memory.failcnt``, v2 ``max`` in memory.events)."""
        if self.version == 1:
            return int(_read(self.path / "memory.failcnt"))
        return _keyed(self.path / "memory.events").get("max", 0)

    def destroy(self, timeout: float = 10.0) -> None:
        """SIGKILL what is left inside (only processes we started there), then remove it."""
        deadline = time.monotonic() + timeout
        while True:
            for pid in self.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:  # EBUSY while a killed task is still exiting
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
            time.sleep(0.05)


def _enable_memory(parent: Path) -> None:
    """v2: let ``parent``'s children have the memory controller (root may always do this)."""
    control = parent / "cgroup.subtree_control"
    if "memory" not in _read(control).split():
        control.write_text("+memory")


@contextmanager
def memory_cgroup(limit_bytes: int, *, name_prefix: str = "llm-guard-oom",
                  root: Path = CGROUP_ROOT) -> Iterator[MemoryCgroup]:
    """A fresh limited cgroup for the ``with`` block, destroyed (its processes killed) after."""
    cgroup = MemoryCgroup.create(limit_bytes, name=f"{name_prefix}-{uuid.uuid4().hex[:8]}",
                                 root=root)
    try:
        yield cgroup
    finally:
        cgroup.destroy()
