"""A fake cgroup filesystem for the cgroup reader and the memory sources' tests."""

from __future__ import annotations

from pathlib import Path


def make_tree(tmp_path: Path, proc: str | None, files: dict[str, str]) -> tuple[str, str]:
    """Write a fake /proc/self/cgroup and /sys/fs/cgroup tree; return (root, proc_file).

    ``files`` maps paths relative to the cgroup root to their content; ``proc`` None leaves
    the /proc/self/cgroup file missing.
    """
    root = tmp_path / "cgroup"
    root.mkdir()
    for rel, content in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    proc_file = tmp_path / "proc_self_cgroup"
    if proc is not None:
        proc_file.write_text(proc)
    return str(root), str(proc_file)
