"""Whole-machine RAM, for when no cgroup limit bounds the process."""

from __future__ import annotations

import psutil  # type: ignore[import-untyped,unused-ignore]

from llm_guard_sdk.monitors.base import Reading


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
