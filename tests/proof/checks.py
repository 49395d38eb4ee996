"""The pass criteria the soak and the fault tests share: drained state, RSS, a clean log."""

from __future__ import annotations

import re
import statistics
from typing import Any

import httpx

from tests.support import status, wait_for

#: The soak apps, one per framework (real uvicorn serves each).
SOAK_APPS = {
    "fastapi": "tests.proof.apps.soak_fastapi:app",
    "litestar": "tests.proof.apps.soak_litestar:app",
    "channels": "tests.proof.apps.soak_channels:application",
}

#: Settings for the soak servers: the process source, test routes exempt, a short send timeout.
SOAK_ENV = {
    "LLM_GUARD_SOURCES": "process",
    "LLM_GUARD_SAMPLE_INTERVAL": "0.25",
    "LLM_GUARD_EXEMPT_PATHS": "/test",
    "LLM_GUARD_SEND_TIMEOUT": "2",
    "LLM_GUARD_CLOSE_GRACE": "1",
}

#: A traceback the soak causes on purpose: the adapters log each injected model failure once.
_INJECTED = re.compile(r"^[^\n]*raised mid-stream \(InjectedFailure\).*?InjectedFailure: injected "
                       r"failure at token \d+\n", re.DOTALL | re.MULTILINE)


async def snapshot(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    """The guard's status and the app's own counters together."""
    doc = await status(client, base)
    app: dict[str, Any] = (await client.get(f"{base}/test/soak")).json()
    return {"sessions": doc["sessions"]["active"] + doc["sessions"]["idle"],
            "streams_open": doc["streams"]["open"],
            "generators_open": app["generators"]["open"],
            "backend_open": app["backend"]["open"],
            "status": doc, "app": app}


async def wait_drained(client: httpx.AsyncClient, base: str,
                       timeout: float = 60.0) -> dict[str, Any]:  # noqa: ASYNC109
    """Wait until nothing is open (sessions, streams, generators, backend requests)."""
    last: dict[str, Any] = {}

    async def drained() -> bool:
        nonlocal last
        last = await snapshot(client, base)
        return not (last["sessions"] or last["streams_open"] or last["generators_open"]
                    or last["backend_open"])

    try:
        await wait_for(drained, timeout=timeout, interval=0.25)
    except AssertionError:
        raise AssertionError(f"state left open after {timeout}s: "
                             f"{ {k: v for k, v in last.items() if k not in ('status', 'app')} }"
                             ) from None
    return last


async def settled(client: httpx.AsyncClient, base: str, samples: int = 5) -> dict[str, int]:
    """Medians over ``samples`` measurements of RSS, gc-tracked objects and allocated blocks.

    Each is taken by the server after ``gc.collect()`` and ``malloc_trim(0)``. The counts are
    the allocator-independent half of the leak check: RSS also moves with fragmentation,
    the number of live objects (``gc.get_objects()``) and of allocated blocks
    (``sys.getallocatedblocks()``, strings and bytes included) only with what is kept.
    """
    docs = [(await client.post(f"{base}/test/measure")).json() for _ in range(samples)]
    return {key: int(statistics.median(d[key] for d in docs))
            for key in ("rss_bytes", "gc_objects", "allocated_blocks")}


#: uvicorn's own report of a WebSocket text frame that is not UTF-8 (it closes 1007): a
#: protocol error handled by the server, not an exception that escaped the app.
_UVICORN_UTF8 = re.compile(r"^ERROR: +Invalid UTF-8 sequence received from client\.\n"
                           r"Traceback.*?\nUnicodeDecodeError: [^\n]*\n", re.DOTALL | re.MULTILINE)

#: What uvicorn logs when an app returns with its response unfinished: after the guard
#: abandoned a send to a frozen reader (send timeout), that is the only way to drop the
#: connection, so the soak expects at most one such line per send timeout.
UNFINISHED = "ASGI callable returned without completing response."


def unexpected_errors(log: str, *, send_timeouts: int = 0) -> list[str]:
    """Lines of ``log`` that show an unhandled exception, the expected ones taken out.

    Expected: the injected failures' tracebacks (the adapters log each once), uvicorn's report
    of invalid UTF-8 in a WebSocket frame, and at most ``send_timeouts`` :data:`UNFINISHED`
    lines.
    """
    rest = _UVICORN_UTF8.sub("", _INJECTED.sub("", log))
    lines = rest.splitlines()
    unfinished = sum(UNFINISHED in line for line in lines)
    bad = [line for line in lines if UNFINISHED not in line and (
        "Traceback" in line or "Exception in ASGI application" in line
        or line.startswith("ERROR"))]
    if unfinished > send_timeouts:
        bad.append(f"{unfinished} x {UNFINISHED!r} for {send_timeouts} send timeouts")
    return bad


#: The soak app with its tokens from a real vLLM engine (tests/proof/apps/soak_vllm.py).
VLLM_SOAK_ENV = {**SOAK_ENV, "SOAK_BACKEND": "vllm"}


def vllm_engine_checks(before: dict[str, Any], after: dict[str, Any], resets: int,
                       cut: int, raised: int, probe: dict[str, Any]) -> dict[str, bool]:
    """The engine's side of the vLLM soak, from the backend reports around the measured run.

    ``before``/``after``: ``/test/soak``'s ``backend`` section; ``resets``, ``cut``,
    ``raised``: what the clients counted in the run (TCP resets, frozen readers cut by the
    send timeout, injected failures); ``probe``: ``POST /test/engine-probe`` after the drain.
    """
    def grew(key: str) -> int:
        return int(after[key]) - int(before[key])

    abandoned, aborted = grew("abandoned"), grew("engine_aborted")
    return {
        # the engine's own table of unfinished requests is empty
        "engine_unfinished_zero": after["open"] == 0,
        # the scheduler, in the engine-core process, holds only the probe while it runs
        "scheduler_holds_only_probe": (probe["steps"] > 0
                                       and probe["scheduler_peak_running"] <= 1
                                       and probe["scheduler_peak_waiting"] == 0),
        # every stream the clients abandoned was aborted in the engine, unless it held none
        "abandoned_aborted": grew("abandoned_aborted") + grew("abandoned_not_held")
        == abandoned and aborted == grew("abandoned_aborted") and aborted > 0,
        # nothing the clients were still reading was aborted
        "no_stray_aborts": after["aborted_unknown"] == 0,
        # only abandoned streams: resets, cut frozen readers, injected failures
        "abandoned_by_clients": 0 < abandoned <= resets + cut + raised,
        # the integration counted the same aborts (a stream closed before it reached the
        # engine is in neither), and no engine error
        "sdk_counts_agree": (aborted <= after["sdk"]["aborted"] - before["sdk"]["aborted"]
                             <= abandoned and after["sdk"]["errors"] == 0),
    }


RSS_TOLERANCE = 0.05  # settled RSS after the load, over the post-warm-up baseline
COUNT_TOLERANCE = 0.02  # live objects / allocated blocks: noise well under 1 %


def assert_left_clean(after: dict[str, Any], baseline: int, final: int,
                      before_load: dict[str, int], after_load: dict[str, int],
                      log_text: str) -> None:
    """The soak's common end state: no internal error, RSS and object counts back, clean log."""
    assert after["status"]["errors"]["internal_total"] == 0
    assert final <= baseline * (1 + RSS_TOLERANCE), (baseline, final)
    for key in ("gc_objects", "allocated_blocks"):
        assert after_load[key] <= before_load[key] * (1 + COUNT_TOLERANCE), key
    all_timeouts = after["status"]["sessions"]["send_timeout_total"]  # the warm-up's too
    assert unexpected_errors(log_text, send_timeouts=all_timeouts) == []
