from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import FrozenInstanceError
from pathlib import Path

import psutil
import pytest

from llm_guard_sdk.monitors import (
    CgroupMemory,
    CgroupSource,
    HostRAMSource,
    MemorySource,
    ProcessRSSSource,
    Reading,
    build,
    build_monitors,
    choose_limit,
    effective_limit,
)
from tests.support.cgroup import make_tree

MiB = 2**20
HOST_TOTAL = psutil.virtual_memory().total
CHILD_CODE = "import time; b=bytearray(50*2**20); time.sleep(30)"


def v2_tree(tmp_path: Path, limit: str) -> tuple[str, str]:
    return make_tree(
        tmp_path,
        "0::/app\n",
        {
            "cgroup.controllers": "memory\n",
            "app/memory.current": str(3 * MiB),
            "app/memory.max": limit,
            "app/memory.stat": f"anon 100\ninactive_file {MiB}\n",
        },
    )


@pytest.mark.parametrize(
    ("used", "limit", "pressure"),
    [(50, 100, 0.5), (150, 100, 1.5), (0, 100, 0.0), (1, None, None), (1, 0, None)],
)
def test_reading_pressure(used: int, limit: int | None, pressure: float | None) -> None:
    assert Reading("x", used, limit).pressure == pressure


def test_reading_is_frozen_with_empty_detail() -> None:
    reading = Reading("x", 1, 2)
    assert reading.detail == {}
    with pytest.raises(FrozenInstanceError):
        reading.used_bytes = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("configured", "cgroup", "host", "expected"),
    [
        (None, None, None, None),
        (100, None, None, 100),
        (None, 200, None, 200),
        (None, None, 300, 300),
        (100, 200, 300, 100),
        (400, 200, 300, 200),
        (400, None, 300, 300),
        (None, 500, 300, 300),
    ],
)
def test_effective_limit(
    configured: int | None, cgroup: int | None, host: int | None, expected: int | None
) -> None:
    assert effective_limit(configured, cgroup, host) == expected


def test_process_source_reads_own_rss() -> None:
    source = ProcessRSSSource(10 * 2**30)
    reading = source.read()
    assert reading.name == source.name == "process"
    assert reading.used_bytes > 0
    assert reading.detail["self_rss_bytes"] == reading.used_bytes - int(
        reading.detail["children_rss_bytes"]
    )
    assert reading.limit_bytes == 10 * 2**30
    assert reading.pressure is not None
    assert 0 < reading.pressure < 1


def test_process_source_without_limit_has_no_pressure() -> None:
    assert ProcessRSSSource(None).read().pressure is None


def spawn_child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", CHILD_CODE])


def stop(child: subprocess.Popen[bytes]) -> None:
    child.kill()
    child.wait(timeout=10)


def test_process_source_counts_children() -> None:
    child = spawn_child()
    try:
        source = ProcessRSSSource(None)
        deadline = time.monotonic() + 20
        reading = source.read()
        while int(reading.detail["children_rss_bytes"]) < 40 * MiB:
            assert time.monotonic() < deadline, f"child RSS never showed up: {reading}"
            time.sleep(0.05)
            reading = source.read()
        assert int(reading.detail["children"]) >= 1
        assert reading.used_bytes >= int(reading.detail["self_rss_bytes"]) + 40 * MiB
        solo = ProcessRSSSource(None, include_children=False).read()
        assert solo.detail["children_rss_bytes"] == 0
        assert solo.detail["children"] == 0
    finally:
        stop(child)


def test_process_source_for_other_pid_raises_oserror_once_gone() -> None:
    child = spawn_child()
    try:
        source = ProcessRSSSource(None, pid=child.pid)
        assert source.read().used_bytes > 0
    finally:
        stop(child)
    with pytest.raises(OSError):
        source.read()


def test_host_source_is_sane() -> None:
    reading = HostRAMSource().read()
    assert reading.name == "host"
    assert reading.limit_bytes == HOST_TOTAL
    assert 0 < reading.used_bytes <= HOST_TOTAL
    assert reading.pressure is not None
    assert 0 < reading.pressure <= 1


def test_cgroup_source_reports_working_set(tmp_path: Path) -> None:
    root, _ = v2_tree(tmp_path, str(8 * MiB))
    reading = CgroupSource(CgroupMemory(2, str(Path(root, "app")))).read()
    assert reading.name == "cgroup"
    assert reading.used_bytes == 2 * MiB
    assert reading.limit_bytes == 8 * MiB
    assert reading.pressure == 0.25
    assert reading.detail == {"usage_bytes": 3 * MiB, "inactive_file_bytes": MiB, "version": 2,
                              "limit_path": str(Path(root, "app"))}


def test_cgroup_source_propagates_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        CgroupSource(CgroupMemory(2, str(tmp_path / "gone"))).read()


def names(sources: list[MemorySource]) -> list[str]:
    return [source.name for source in sources]


def process_limit(sources: list[MemorySource]) -> int | None:
    (process,) = [s for s in sources if isinstance(s, ProcessRSSSource)]
    return process.limit_bytes


@pytest.mark.parametrize(
    ("configured", "expected"), [(None, 8 * MiB), (4 * MiB, 4 * MiB), (16 * MiB, 8 * MiB)]
)
def test_build_monitors_with_cgroup_limit(
    tmp_path: Path, configured: int | None, expected: int
) -> None:
    root, proc = v2_tree(tmp_path, str(8 * MiB))
    sources, limit = build_monitors(
        ["process", "cgroup", "host"], configured, cgroup_root=root, proc_self_cgroup=proc
    )
    assert names(sources) == ["process", "cgroup"]
    assert limit == expected
    assert process_limit(sources) == expected
    assert [r.name for r in (s.read() for s in sources)] == ["process", "cgroup"]


def test_build_monitors_without_cgroup_limit_falls_back_to_host(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path, "max")
    monitors = build(["host", "cgroup", "process"], None, cgroup_root=root,
                     proc_self_cgroup=proc)
    assert names(monitors.sources) == ["host", "process"]
    assert (monitors.limit, monitors.limit_source) == (HOST_TOTAL, "host")
    assert process_limit(monitors.sources) == HOST_TOTAL


def test_host_ram_never_decides_with_a_configured_limit(tmp_path: Path) -> None:
    """Other processes filling a laptop must not push an app with its own limit into eviction."""
    root, proc = v2_tree(tmp_path, "max")
    monitors = build(["host", "cgroup", "process"], 64 * MiB, cgroup_root=root,
                     proc_self_cgroup=proc)
    assert names(monitors.sources) == ["process"]
    assert (monitors.limit, monitors.limit_source) == (64 * MiB, "configured")
    assert process_limit(monitors.sources) == 64 * MiB


@pytest.mark.parametrize(("configured", "limit", "origin"), [
    (None, 8 * MiB, "cgroup"), (4 * MiB, 4 * MiB, "configured"), (8 * MiB, 8 * MiB, "configured"),
    (16 * MiB, 8 * MiB, "cgroup")])
def test_build_names_where_the_limit_comes_from(
        tmp_path: Path, configured: int | None, limit: int, origin: str) -> None:
    root, proc = v2_tree(tmp_path, str(8 * MiB))
    monitors = build(["process", "cgroup", "host"], configured, cgroup_root=root,
                     proc_self_cgroup=proc)
    assert names(monitors.sources) == ["process", "cgroup"]
    assert (monitors.limit, monitors.limit_source) == (limit, origin)


@pytest.mark.parametrize(("configured", "cgroup", "host", "expected"), [
    (None, None, None, (None, "")), (None, None, 300, (300, "host")),
    (400, 200, 300, (200, "cgroup")), (100, 200, 300, (100, "configured")),
    (400, None, 300, (300, "host"))])
def test_choose_limit(configured: int | None, cgroup: int | None, host: int | None,
                      expected: tuple[int | None, str]) -> None:
    assert choose_limit(configured, cgroup, host) == expected


def test_build_monitors_without_any_cgroup(tmp_path: Path) -> None:
    sources, limit = build_monitors(
        ["cgroup", "host"],
        None,
        cgroup_root=str(tmp_path / "nothing"),
        proc_self_cgroup=str(tmp_path / "missing"),
    )
    assert names(sources) == ["host"]
    assert limit == HOST_TOTAL


def test_build_monitors_host_only_when_named(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path, "max")
    sources, _ = build_monitors(["process"], None, cgroup_root=root, proc_self_cgroup=proc)
    assert names(sources) == ["process"]


def test_build_monitors_dedupes(tmp_path: Path) -> None:
    root, proc = v2_tree(tmp_path, "max")
    sources, _ = build_monitors(
        ["process", "process"], None, cgroup_root=root, proc_self_cgroup=proc
    )
    assert names(sources) == ["process"]


@pytest.mark.parametrize("bad", [["gpu"], ["process", "Process"], [""]])
def test_build_monitors_unknown_name(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="unknown memory source"):
        build_monitors(bad, None)


def test_build_monitors_on_real_system() -> None:
    sources, limit = build_monitors(["process", "cgroup", "host"], None)
    assert limit is not None
    assert 0 < limit <= HOST_TOTAL
    assert "process" in names(sources)
    assert ("cgroup" in names(sources)) != ("host" in names(sources))
    for source in sources:
        assert source.read().used_bytes >= 0
