"""Monitors: what the sampler reads each tick (memory sources) and what sessions own (sizing).

``base`` holds the :class:`Reading` every source returns, the :class:`MemorySource` protocol and
the one list of built-in source names; ``process``, ``cgroup`` and ``host`` are those sources;
``build`` picks them from the config; ``attachments`` measures what sessions hold, with
``deep_size`` walking an object graph a slice at a time.
"""

from llm_guard_sdk.monitors.attachments import AttachmentSizer
from llm_guard_sdk.monitors.base import SOURCE_NAMES, MemorySource, Reading
from llm_guard_sdk.monitors.build import (
    Monitors,
    build,
    build_monitors,
    choose_limit,
    detect_limit,
    effective_limit,
    find_limit,
)
from llm_guard_sdk.monitors.cgroup import CgroupMemory, CgroupSource, find_memory_cgroup
from llm_guard_sdk.monitors.deep_size import SizeWalk
from llm_guard_sdk.monitors.host import HostRAMSource
from llm_guard_sdk.monitors.process import ProcessRSSSource

__all__ = [
    "SOURCE_NAMES",
    "AttachmentSizer",
    "CgroupMemory",
    "CgroupSource",
    "HostRAMSource",
    "MemorySource",
    "Monitors",
    "ProcessRSSSource",
    "Reading",
    "SizeWalk",
    "build",
    "build_monitors",
    "choose_limit",
    "detect_limit",
    "effective_limit",
    "find_limit",
    "find_memory_cgroup",
]
