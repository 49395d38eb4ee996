"""The soak with abrupt disconnects against a real vLLM engine (issue 13 §2, CI size).

The FastAPI soak app (with its ``BaseHTTPMiddleware``) under real uvicorn, its tokens from a
real in-process ``AsyncLLM`` on the tiny model through ``VLLMGuard``
(``SOAK_BACKEND=vllm``, see tests/proof/apps/soak_vllm.py). :data:`~tests.proof.load.VLLM_SPEC`
drives ``SOAK_VLLM_STREAMS`` (default 16) concurrent streams for ``SOAK_VLLM_SECONDS``
(default 45) after a warm-up of the same mix (``SOAK_VLLM_WARMUP``, default 30 s): 20 % TCP
resets, slow and frozen readers, generators that raise, handlers polling
``is_disconnected()``, SSE and WebSocket. Beside the
simulator soak's criteria (tests/proof/test_soak.py: what each client saw, nothing open,
RSS, a clean log), the engine's own: no unfinished request in its output processor, its
scheduler holding nothing but a probe request, and every stream a client abandoned aborted in
the engine (the engine's aborts counted where it drops them, matched to the streams by id).

Skipped, with the reason in the report, where vLLM cannot be imported.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import replace

import httpx
import pytest

from tests.proof.checks import (
    SOAK_APPS,
    VLLM_SOAK_ENV,
    assert_left_clean,
    settled,
    snapshot,
    vllm_engine_checks,
    wait_drained,
)
from tests.proof.load import VLLM_SPEC, run_load
from tests.support import UvicornServer

pytestmark = [
    pytest.mark.anyio, pytest.mark.e2e, pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed: the soak against a real engine needs it "
                              "(pip install vllm, CPU build)"),
]

STREAMS = int(os.environ.get("SOAK_VLLM_STREAMS", str(VLLM_SPEC.streams)))
SECONDS = float(os.environ.get("SOAK_VLLM_SECONDS", str(VLLM_SPEC.duration)))
WARMUP = float(os.environ.get("SOAK_VLLM_WARMUP", "30"))
START_TIMEOUT = 600.0  # the engine loads torch and the model on a loaded machine


async def test_vllm_soak_leaves_nothing_in_the_engine() -> None:
    server = UvicornServer(SOAK_APPS["fastapi"], env={**os.environ, **VLLM_SOAK_ENV},
                           name="soak-vllm", ready_path="/test/soak")
    server.start(timeout=START_TIMEOUT, attempts=1)
    spec = replace(VLLM_SPEC, streams=STREAMS, duration=SECONDS)
    try:
        async with httpx.AsyncClient(timeout=120, trust_env=False) as admin:
            warm = await run_load(server.port, replace(spec, duration=WARMUP), seed=1)
            assert warm.failures == 0, warm.bad
            await wait_drained(admin, server.url, timeout=180)
            before_load = await settled(admin, server.url)
            before = await snapshot(admin, server.url)

            tally = await run_load(server.port, spec)
            after = await wait_drained(admin, server.url, timeout=180)
            after_load = await settled(admin, server.url)
            probe = (await admin.post(f"{server.url}/test/engine-probe")).json()
    finally:
        server.stop()
    engine_before, engine_after = before["app"]["backend"], after["app"]["backend"]
    baseline, final = before_load["rss_bytes"], after_load["rss_bytes"]
    timed_out = (after["status"]["sessions"]["send_timeout_total"]
                 - before["status"]["sessions"]["send_timeout_total"])
    raised = after["app"]["generators"]["raised"] - before["app"]["generators"]["raised"]
    checks = vllm_engine_checks(engine_before, engine_after, tally.count("reset"),
                                tally.count("cut"), raised, probe)
    print(f"\nvllm: {tally.total} streams, {dict(tally.outcomes)}; engine {engine_before} -> "
          f"{engine_after}; probe {probe}; RSS {baseline / 2**20:.1f} -> {final / 2**20:.1f} "
          f"MiB ({final / baseline - 1:+.2%}); settled {before_load} -> {after_load}")
    assert tally.failures == 0, tally.bad
    assert tally.count("reset") > 0 and tally.count("ok") > 0
    assert tally.count("cut") == timed_out, (tally.count("cut"), timed_out)
    assert raised > 0
    assert [name for name, ok in checks.items() if not ok] == [], checks
    assert_left_clean(after, baseline, final, before_load, after_load, server.log_text())
