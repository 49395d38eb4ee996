from __future__ import annotations

from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from llm_guard_sdk.monitors.cgroup import CgroupMemory, CgroupSource, find_memory_cgroup
from tests.support.cgroup import make_tree

V1_UNLIMITED = "9223372036854771712"
MiB = 2**20


V2_STAT = "anon 1000\nfile 500\nactive_file 100\ninactive_file 300\n"
V1_STAT = "cache 900\ninactive_file 50\ntotal_inactive_file 400\nhierarchical_memory_limit " + (
    V1_UNLIMITED + "\n"
)

# id, /proc/self/cgroup, files, expected (version, dir relative to root) or None
CASES: list[tuple[str, str | None, dict[str, str], tuple[int, str] | None]] = [
    (
        "v2-limit",
        "0::/kubepods/pod1/ctr\n",
        {
            "cgroup.controllers": "cpu memory pids\n",
            "kubepods/pod1/ctr/memory.current": "1000\n",
            "kubepods/pod1/ctr/memory.max": "4096\n",
            "kubepods/pod1/ctr/memory.stat": V2_STAT,
        },
        (2, "kubepods/pod1/ctr"),
    ),
    (
        "v2-max",
        "0::/app\n",
        {
            "cgroup.controllers": "memory\n",
            "app/memory.current": "1000\n",
            "app/memory.max": "max\n",
            "app/memory.stat": V2_STAT,
        },
        (2, "app"),
    ),
    (
        "v1-limit",
        "5:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n",
        {
            "memory/docker/abc/memory.usage_in_bytes": "1000\n",
            "memory/docker/abc/memory.limit_in_bytes": "2147483648\n",
            "memory/docker/abc/memory.stat": V1_STAT,
        },
        (1, "memory/docker/abc"),
    ),
    (
        "v1-unlimited",
        "4:memory:/process_api/x\n0::/\n",
        {
            "memory/process_api/x/memory.usage_in_bytes": "1000\n",
            "memory/process_api/x/memory.limit_in_bytes": V1_UNLIMITED + "\n",
            "memory/process_api/x/memory.stat": V1_STAT,
        },
        (1, "memory/process_api/x"),
    ),
    (
        "v2-namespaced-falls-back-to-root",
        "0::/system.slice/docker-abc.scope\n",
        {"cgroup.controllers": "memory\n", "memory.current": "1000\n", "memory.max": "4096\n"},
        (2, ""),
    ),
    (
        "v1-namespaced-falls-back-to-parent",
        "4:memory:/docker/abc\n",
        {
            "memory/docker/memory.usage_in_bytes": "1000\n",
            "memory/docker/memory.limit_in_bytes": "4096\n",
            "memory/memory.usage_in_bytes": "5000\n",
        },
        (1, "memory/docker"),
    ),
    (
        "v1-leaf-garbage-falls-back-to-parent",
        "4:memory:/a/b\n",
        {"memory/a/b/memory.usage_in_bytes": "junk\n", "memory/a/memory.usage_in_bytes": "1\n"},
        (1, "memory/a"),
    ),
    (
        "v1-combined-controller-dir",
        "3:cpu,memory:/svc\n",
        {"cpu,memory/svc/memory.usage_in_bytes": "1000\n"},
        (1, "cpu,memory/svc"),
    ),
    (
        "hybrid-prefers-v1",
        "4:memory:/user.slice\n0::/user.slice/session.scope\n",
        {
            "memory/user.slice/memory.usage_in_bytes": "1000\n",
            "unified/cgroup.controllers": "\n",
            "unified/user.slice/session.scope/memory.current": "1000\n",
        },
        (1, "memory/user.slice"),
    ),
    (
        "hybrid-without-v1-memory-uses-unified",
        "4:memory:/user.slice\n0::/user.slice/session.scope\n",
        {
            "unified/cgroup.controllers": "memory\n",
            "unified/user.slice/session.scope/memory.current": "1000\n",
        },
        (2, "unified/user.slice/session.scope"),
    ),
    ("no-proc-file", None, {"memory/memory.usage_in_bytes": "1\n"}, None),
    ("v2-line-but-not-unified-mount", "0::/\n", {"memory.current": "1\n"}, None),
    ("v2-host-root-has-no-memory-current", "0::/init.scope\n", {"cgroup.controllers": "x"}, None),
    ("garbage-proc-file", "not a cgroup file\n\n", {"cgroup.controllers": "memory"}, None),
]


@pytest.mark.parametrize(
    ("proc", "files", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_find_memory_cgroup(
    tmp_path: Path, proc: str | None, files: dict[str, str], expected: tuple[int, str] | None
) -> None:
    root, proc_file = make_tree(tmp_path, proc, files)
    found = find_memory_cgroup(root, proc_file)
    if expected is None:
        assert found is None
        return
    version, rel = expected
    assert found is not None
    assert found.version == version
    assert Path(found.path) == Path(root, rel)


@pytest.mark.parametrize(
    ("version", "files", "limit"),
    [
        (2, {"memory.max": "4096\n"}, 4096),
        (2, {"memory.max": "max\n"}, None),
        (1, {"memory.limit_in_bytes": "2147483648\n"}, 2147483648),
        (1, {"memory.limit_in_bytes": V1_UNLIMITED + "\n"}, None),
        (1, {"memory.limit_in_bytes": str(2**62)}, None),
        (
            1,
            {
                "memory.limit_in_bytes": V1_UNLIMITED,
                "memory.stat": "hierarchical_memory_limit 1048576\n",
            },
            1048576,
        ),
        (
            1,
            {"memory.limit_in_bytes": "4096", "memory.stat": "hierarchical_memory_limit 8192\n"},
            4096,
        ),
    ],
    ids=["v2", "v2-max", "v1", "v1-huge", "v1-2**62", "v1-parent-limit", "v1-own-tighter"],
)
def test_limit_bytes(
    tmp_path: Path, version: int, files: dict[str, str], limit: int | None
) -> None:
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    assert CgroupMemory(version, str(tmp_path)).limit_bytes() == limit


@pytest.mark.parametrize(
    ("version", "usage", "stat", "inactive", "working_set"),
    [
        (2, 1000, V2_STAT, 300, 700),
        (1, 1000, V1_STAT, 400, 600),
        (1, 1000, "inactive_file 250\n", 250, 750),
        (2, 1000, "anon 1000\n", 0, 1000),
        (2, 1000, "weird line\ninactive_file notanumber\n\n", 0, 1000),
        (2, 100, "inactive_file 300\n", 300, 0),
    ],
    ids=["v2", "v1-total", "v1-local-fallback", "missing", "garbage", "clamped"],
)
def test_working_set(
    tmp_path: Path, version: int, usage: int, stat: str, inactive: int, working_set: int
) -> None:
    usage_file = "memory.current" if version == 2 else "memory.usage_in_bytes"
    (tmp_path / usage_file).write_text(f"{usage}\n")
    (tmp_path / "memory.stat").write_text(stat)
    cg = CgroupMemory(version, str(tmp_path))
    assert cg.usage_bytes() == usage
    assert cg.inactive_file_bytes() == inactive
    assert cg.working_set_bytes() == working_set


def test_files_are_reread_each_call(tmp_path: Path) -> None:
    (tmp_path / "memory.current").write_text("10")
    cg = CgroupMemory(2, str(tmp_path))
    assert cg.usage_bytes() == 10
    (tmp_path / "memory.current").write_text("20")
    assert cg.usage_bytes() == 20


@pytest.mark.parametrize("content", ["junk", ""])
def test_unparseable_usage_is_oserror(tmp_path: Path, content: str) -> None:
    (tmp_path / "memory.current").write_text(content)
    with pytest.raises(OSError, match="unparseable"):
        CgroupMemory(2, str(tmp_path)).usage_bytes()


def test_missing_files_raise_oserror(tmp_path: Path) -> None:
    cg = CgroupMemory(1, str(tmp_path / "gone"))
    with pytest.raises(OSError):
        cg.usage_bytes()
    with pytest.raises(OSError):
        cg.limit_bytes()


def test_frozen(tmp_path: Path) -> None:
    cg = CgroupMemory(2, str(tmp_path))
    with pytest.raises(FrozenInstanceError):
        cg.version = 1  # type: ignore[misc]


def test_real_system_does_not_crash() -> None:
    found = find_memory_cgroup()
    assert found is None or found.version in (1, 2)
    if found is not None:
        assert found.usage_bytes() >= 0
        assert found.working_set_bytes() >= 0
        limit = found.limit_bytes()
        assert limit is None or limit > MiB


# --- cgroup v2: the smallest memory.max of the cgroup and its ancestors ------------------

POD = "kubepods.slice/kubepods-burstable.slice/pod1.slice"


def pod_tree(tmp_path: Path, *, container: str, pod: str, slice_: str) -> tuple[str, str]:
    """A kubelet-style v2 tree: root (no memory.max) > slice > pod > container."""
    ctr = f"{POD}/cri-containerd-abc.scope"
    return make_tree(tmp_path, f"0::/{ctr}\n", {
        "cgroup.controllers": "cpu memory pids\n",
        "memory.current": str(900 * MiB),  # the root: usage, but never a limit
        "kubepods.slice/memory.max": slice_,
        "kubepods.slice/memory.current": str(800 * MiB),
        "kubepods.slice/memory.stat": "inactive_file 0\n",
        f"{POD}/memory.max": pod,
        f"{POD}/memory.current": str(300 * MiB),
        f"{POD}/memory.stat": f"inactive_file {100 * MiB}\n",
        f"{ctr}/memory.max": container,
        f"{ctr}/memory.current": str(50 * MiB),
        f"{ctr}/memory.stat": "inactive_file 0\n",
    })


@pytest.mark.parametrize(("container", "pod", "slice_", "limit", "level"), [
    ("max", str(512 * MiB), str(4096 * MiB), 512 * MiB, POD),  # the pod's limit applies
    ("max", "max", str(1024 * MiB), 1024 * MiB, "kubepods.slice"),
    (str(256 * MiB), str(512 * MiB), "max", 256 * MiB, f"{POD}/cri-containerd-abc.scope"),
    ("max", "max", "max", None, f"{POD}/cri-containerd-abc.scope"),
], ids=["pod", "slice", "own-tightest", "unlimited"])
def test_v2_limit_is_the_smallest_over_ancestors(
        tmp_path: Path, container: str, pod: str, slice_: str, limit: int | None,
        level: str) -> None:
    root, proc = pod_tree(tmp_path, container=container, pod=pod, slice_=slice_)
    cgroup = find_memory_cgroup(root, proc)
    assert cgroup is not None and cgroup.root == root
    assert cgroup.limit_bytes() == limit
    limiting, found = cgroup.limiting()
    assert found == limit and Path(limiting.path) == Path(root, level)


def test_source_reads_the_usage_of_the_level_whose_limit_applies(tmp_path: Path) -> None:
    """Siblings in the pod are charged against the pod's limit too."""
    root, proc = pod_tree(tmp_path, container="max", pod=str(512 * MiB), slice_="max")
    cgroup = find_memory_cgroup(root, proc)
    assert cgroup is not None
    reading = CgroupSource(cgroup).read()
    assert (reading.used_bytes, reading.limit_bytes) == (200 * MiB, 512 * MiB)
    assert reading.detail["limit_path"] == str(Path(root, POD))


def test_ancestors_stop_at_the_mount(tmp_path: Path) -> None:
    root, proc = pod_tree(tmp_path, container="max", pod="max", slice_="max")
    cgroup = find_memory_cgroup(root, proc)
    assert cgroup is not None
    paths = [Path(c.path) for c in cgroup.ancestors()]
    assert paths[0] == Path(cgroup.path) and paths[-1] == Path(root)
    assert len(paths) == 5
    assert CgroupMemory(2, cgroup.path).ancestors() == [CgroupMemory(2, cgroup.path)]
