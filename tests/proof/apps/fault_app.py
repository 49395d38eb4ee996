"""The FastAPI soak app plus a memory source a test can break (``POST /test/source``).

``uvicorn tests.proof.apps.fault_app:app``. The source ``flaky`` reads a tiny constant
pressure until ``/test/source?failing=true``; then every read raises ``OSError``, as a
cgroup file that vanished or a metrics endpoint that stopped answering would.
"""

from __future__ import annotations

from llm_guard_sdk import Reading
from tests.proof.apps.soak_fastapi import app, guard


class FlakySource:
    """A memory source that fails on demand."""

    name = "flaky"

    def __init__(self) -> None:
        self.failing = False

    def read(self) -> Reading:
        if self.failing:
            raise OSError("flaky: injected read failure")
        return Reading(self.name, 1, 1000)


source = FlakySource()
guard.add_source(source)


@app.post("/test/source")
async def set_source(failing: bool) -> dict[str, bool]:
    source.failing = failing
    return {"failing": failing}
