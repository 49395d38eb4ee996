"""Soak with abrupt disconnects, on FastAPI, Litestar and Channels (issue 13 §2, CI size).

Each framework's soak app (tests/proof/apps/) runs under real uvicorn; :mod:`tests.proof.load`
drives ``SOAK_STREAMS`` (default 200) concurrent streams for ``SOAK_SECONDS`` (default 45)
over SSE and WebSocket: 20 % reset abruptly (TCP RST), slow and frozen readers, generators
that raise mid-stream, handlers polling ``is_disconnected()`` and, on FastAPI, a Starlette
``BaseHTTPMiddleware`` in the stack. What tests/asgi and tests/adapters prove one client at a
time, this proves for thousands of mixed streams on each framework. Pass criteria, all on
counts and states:

- every client saw what it should (whole answers with ``done``, the error event or frame
  after an injected failure); every frozen reader that was cut was cut by the guard's send
  timeout (``send_timeout_total``), and at least one was;
- afterwards no generator is open (the app's own counter), no simulator request is
  unfinished, no session and no stream is open (guard status), no internal error;
- RSS (median of 5, each after ``gc.collect()`` and ``malloc_trim`` in the server) has grown
  by at most 5 % over its value after a warm-up that is the same load once before: the
  warm-up lets the allocator reach its working set under this load, so later growth is
  what the load kept (a leak), and 5 % leaves room for allocator fragmentation (see
  docs/reliability.md, "Soak"); live gc-tracked objects and allocated blocks, measured the
  same way, have grown by at most 2 % (a leak of Python objects or strings shows there
  whatever the allocator does);
- the server log has no traceback but the injected failures' (logged once each by the
  adapters), and no "Exception in ASGI application".
"""

from __future__ import annotations

import os

import httpx
import pytest

from tests.proof.checks import (
    SOAK_APPS,
    SOAK_ENV,
    assert_left_clean,
    settled,
    snapshot,
    wait_drained,
)
from tests.proof.load import LoadSpec, run_load
from tests.support import UvicornServer

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

STREAMS = int(os.environ.get("SOAK_STREAMS", "200"))
SECONDS = float(os.environ.get("SOAK_SECONDS", "30"))


@pytest.mark.parametrize("framework", list(SOAK_APPS))
async def test_soak_leaves_nothing_behind(framework: str) -> None:
    server = UvicornServer(SOAK_APPS[framework], env={**os.environ, **SOAK_ENV},
                           name=f"soak-{framework}", ready_path="/test/soak")
    server.start()
    spec = LoadSpec(streams=STREAMS, duration=SECONDS)
    try:
        async with httpx.AsyncClient(timeout=60, trust_env=False) as admin:
            warm = await run_load(server.port, spec, seed=1)  # the same load, once before
            assert warm.failures == 0, warm.bad
            await wait_drained(admin, server.url)
            before_load = await settled(admin, server.url)
            before = (await snapshot(admin, server.url))["status"]

            tally = await run_load(server.port, spec)
            after = await wait_drained(admin, server.url)
            after_load = await settled(admin, server.url)
    finally:
        server.stop()
    baseline, final = before_load["rss_bytes"], after_load["rss_bytes"]
    print(f"\n{framework}: {tally.total} streams, {dict(tally.outcomes)}; RSS "
          f"{baseline / 2**20:.1f} -> {final / 2**20:.1f} MiB ({final / baseline - 1:+.2%}); "
          f"settled counts {before_load} -> {after_load}")
    assert tally.failures == 0, tally.bad
    assert tally.count("reset") > 0 and tally.count("ok") > 0
    timed_out = (after["status"]["sessions"]["send_timeout_total"]
                 - before["sessions"]["send_timeout_total"])
    assert 0 < tally.count("cut") == timed_out, (tally.count("cut"), timed_out)
    assert after["app"]["generators"]["raised"] > 0
    # polling handlers streamed to the end, and those reset were closed like the others (the
    # guard's close reaches them at their yield before their next poll would)
    assert tally.outcomes["poll:ok"] > 0 and tally.outcomes["reset-poll:reset"] > 0
    assert_left_clean(after, baseline, final, before_load, after_load, server.log_text())
