"""The Litestar demo plus test-only routes under the exempt ``/test`` prefix."""

from __future__ import annotations

from typing import Any

from litestar import delete, get, post
from litestar.params import FromQuery

from examples.litestar_app import create_app
from llm_guard_sdk.testing.backends import select_backend
from tests.adapters.apps import ballast

backend = select_backend()


@get("/test/stats", sync_to_thread=False)
def stats() -> dict[str, Any]:
    return ballast.stats(backend)


@post("/test/ballast", sync_to_thread=False, status_code=200)
def hold(mib: FromQuery[int]) -> dict[str, int]:
    return ballast.hold(mib)


@delete("/test/ballast", sync_to_thread=False, status_code=200)
def drop() -> dict[str, int]:
    return ballast.drop()


app = create_app(backend=backend, route_handlers=[stats, hold, drop])
