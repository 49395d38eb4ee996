"""Test-only hooks shared by the adapter test apps: simulator counters and a memory ballast."""

from __future__ import annotations

from typing import Any

from llm_guard_sdk.testing.backends import Backend, SimulatedBackend

_held: list[bytearray] = []


def stats(backend: Backend) -> dict[str, Any]:
    if not isinstance(backend, SimulatedBackend):
        return {"backend": backend.name}
    s = backend.llm.stats
    return {"started": s.started, "closed": s.closed, "finished": s.finished, "open": s.open}


def hold(mib: int) -> dict[str, int]:
    """Allocate ``mib`` MiB and touch every page so it counts in RSS."""
    block = bytearray(mib * 2**20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    _held.append(block)
    return {"held_mib": sum(len(b) for b in _held) // 2**20}


def drop() -> dict[str, int]:
    _held.clear()
    return {"held_mib": 0}
