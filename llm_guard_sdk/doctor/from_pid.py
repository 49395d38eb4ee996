"""Collect the facts from outside a process, by its id: psutil and its memory cgroup.

What another process can see: its RSS (with its children, as the guard counts it), open
descriptors and their limit, threads, and its memory cgroup's usage and limit (v1 or v2, found
from ``/proc/PID/cgroup`` by the guard's own :mod:`llm_guard_sdk.monitors.cgroup`). The
thresholds and the configured limit come from the process's own ``LLM_GUARD_*`` environment
when it can be read. Sessions, tasks, gc, leaks, vLLM and latency live inside the process:
those indicators are reported as null with a note saying to use ``--url``.
"""

from __future__ import annotations

from collections.abc import Mapping

import psutil  # type: ignore[import-untyped,unused-ignore]

from llm_guard_sdk.cli_common import EXIT_USAGE, CommandError
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.doctor.model import Facts
from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.monitors.build import find_limit
from llm_guard_sdk.monitors.cgroup import CgroupSource, find_memory_cgroup
from llm_guard_sdk.monitors.process import ProcessRSSSource

CGROUP_ROOT = "/sys/fs/cgroup"
PROC_ROOT = "/proc"


def open_process(pid: int) -> psutil.Process:
    """The process, readable; else one line with exit code 2."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            raise CommandError(f"pid {pid} has exited (a zombie)", code=EXIT_USAGE)
        process.memory_info()
    except psutil.NoSuchProcess:
        raise CommandError(f"no process with pid {pid}", code=EXIT_USAGE) from None
    except psutil.AccessDenied:
        raise CommandError(f"pid {pid}: access denied (run as its user or root)",
                           code=EXIT_USAGE) from None
    except (ValueError, OverflowError):
        raise CommandError(f"invalid pid {pid}", code=EXIT_USAGE) from None
    return process


def target_config(process: psutil.Process) -> tuple[GuardConfig, str]:
    """The guard settings the process's environment gives, and a note on where they came from."""
    try:
        environ: Mapping[str, str] = process.environ()
    except psutil.Error:
        return GuardConfig.defaults(), "settings: the process's environment is not readable; " \
                                      "the defaults assumed"
    known = set(GuardConfig.env_names().values())
    mine = {name: value for name, value in environ.items() if name in known}
    try:
        return GuardConfig.from_env(mine), "settings: from the process's environment"
    except ConfigError as exc:
        return GuardConfig.defaults(), f"settings: the defaults assumed ({exc})"


def _fd_limit(process: psutil.Process) -> int | None:
    try:
        soft = int(process.rlimit(psutil.RLIMIT_NOFILE)[0])
    except (AttributeError, psutil.Error, OSError):
        return None
    return None if soft == psutil.RLIM_INFINITY else soft


def _cgroup_reading(membership: str, cgroup_root: str, facts: Facts) -> None:
    cgroup = find_memory_cgroup(cgroup_root, membership)
    if cgroup is None:
        facts.absent["cgroup_usage"] = "no readable memory cgroup for this process"
        return
    try:
        reading = CgroupSource(cgroup).read()
    except OSError as exc:
        facts.absent["cgroup_usage"] = f"its cgroup cannot be read: {exc}"
        return
    facts.cgroup_used_bytes, facts.cgroup_limit_bytes = reading.used_bytes, reading.limit_bytes


def collect_pid(pid: int, *, cgroup_root: str = CGROUP_ROOT, proc_root: str = PROC_ROOT
                ) -> Facts:
    """What psutil and the cgroup files say about ``pid`` (the roots: parameters for tests)."""
    process = open_process(pid)
    membership = f"{proc_root}/{pid}/cgroup"  # which cgroup it is in, v1 or v2
    config, note = target_config(process)
    facts = Facts(mode="pid", target=f"pid {pid} ({process.name()})",
                  warn_at=config.warn_at, evict_at=config.evict_at, shed_at=config.shed_at,
                  max_sessions=config.max_sessions, idle_timeout=config.idle_timeout,
                  idle_timeout_level=config.idle_timeout_level, notes=[note])
    try:
        facts.rss_bytes = ProcessRSSSource(None, pid=pid).read().used_bytes
        facts.threads = int(process.num_threads())
        facts.open_fds = int(process.num_fds())
    except (OSError, psutil.Error) as exc:
        raise CommandError(f"pid {pid}: cannot read it ({exc})", code=EXIT_USAGE) from None
    facts.max_fds = _fd_limit(process)
    _cgroup_reading(membership, cgroup_root, facts)
    limit, origin = find_limit(config.memory_limit, cgroup_root=cgroup_root,
                               proc_self_cgroup=membership)
    facts.limit_bytes, facts.limit_source = limit, origin or None
    pressures = {"process": facts.rss_bytes / limit if limit else None}
    if facts.cgroup_used_bytes is not None and facts.cgroup_limit_bytes:
        pressures["cgroup"] = facts.cgroup_used_bytes / facts.cgroup_limit_bytes
    known = {name: value for name, value in pressures.items() if value is not None}
    if known:
        facts.deciding_source = max(known, key=lambda name: known[name])
        facts.pressure = known[facts.deciding_source]
    facts.rate_basis = "not visible from outside the process"
    return facts
