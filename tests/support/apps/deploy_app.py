"""The demo app with one more memory source at a pressure the test chooses (the PromQL tests).

``uvicorn tests.support.apps.deploy_app:app`` serves ``examples/fastapi_app.py`` (the simulated
backend, by ``LLM_GUARD_*`` and ``LLM_GUARD_DEMO_*`` from the test). Its guard gets a
:class:`~tests.support.sources.FakeSource` named ``fixed`` (limit 1000 bytes): with a generous
``LLM_GUARD_MEMORY_LIMIT`` the process source stays far below it, so the pod's worst pressure is
known exactly whatever RSS does under load.

``DEPLOY_TEST_PERMILLE`` is a comma-separated list of used bytes (per mille of the limit), one per
worker: with ``uvicorn --workers N`` each worker process takes the next free ticket in the
directory ``DEPLOY_TEST_TICKETS`` (an exclusive create), so the workers' values are known though
not which pid gets which. ``POST /test/fixed?permille=N`` sets the answering worker's value and
samples at once; it answers ``{"pid", "permille", "level"}`` (keep ``/test`` exempt so it is never
shed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from examples.fastapi_app import create_app
from llm_guard_sdk.testing.backends import select_backend
from tests.support.sources import FakeSource


def _claim_permille() -> int:
    """This worker's value: the first ticket it can create exclusively picks it."""
    values = [int(v) for v in os.environ.get("DEPLOY_TEST_PERMILLE", "0").split(",")]
    tickets = os.environ.get("DEPLOY_TEST_TICKETS")
    if tickets is None:
        return values[0]
    for index, value in enumerate(values):
        try:
            fd = os.open(Path(tickets) / str(index), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return value
    raise RuntimeError(f"more workers than DEPLOY_TEST_PERMILLE values ({values})")


fixed = FakeSource(used=_claim_permille(), limit=1000, name="fixed")
app = create_app(backend=select_backend())
guard = app.state.guard
guard.add_source(fixed)


@app.post("/test/fixed")
async def set_fixed(permille: int) -> dict[str, Any]:
    fixed.used = permille
    guard.sample_now()
    return {"pid": os.getpid(), "permille": fixed.used, "level": guard.policy.level.label}
