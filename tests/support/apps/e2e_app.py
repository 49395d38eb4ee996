"""The demo app plus test-only hooks: backend counters and a memory ballast.

``uvicorn tests.support.apps.e2e_app:app`` with ``LLM_GUARD_*`` set by the test. The ballast lets a
test raise real RSS past the configured limit and drop it again.
"""

from __future__ import annotations

from typing import Any

from examples.fastapi_app import create_app
from llm_guard_sdk.testing.backends import SimulatedBackend, select_backend

backend = select_backend()
app = create_app(backend=backend)
_ballast: list[bytearray] = []


@app.get("/test/stats")
async def stats() -> dict[str, Any]:
    if not isinstance(backend, SimulatedBackend):
        return {"backend": backend.name}
    s = backend.llm.stats
    return {"started": s.started, "closed": s.closed, "finished": s.finished, "open": s.open}


@app.post("/test/kill-engine")
async def kill_engine() -> dict[str, int]:
    """SIGKILL the vLLM engine-core child, as the OOM killer would."""
    import psutil

    killed = 0
    for child in psutil.Process().children(recursive=True):
        if "EngineCore" in " ".join(child.cmdline() or [child.name()]) or \
                "EngineCore" in child.name():
            child.kill()
            killed += 1
    return {"killed": killed}


@app.post("/test/ballast")
async def ballast(mib: int) -> dict[str, int]:
    block = bytearray(mib * 2**20)
    for i in range(0, len(block), 4096):  # touch every page so it counts in RSS
        block[i] = 1
    _ballast.append(block)
    return {"held_mib": sum(len(b) for b in _ballast) // 2**20}


@app.delete("/test/ballast")
async def drop_ballast() -> dict[str, int]:
    _ballast.clear()
    return {"held_mib": 0}
