"""The soak's vLLM backend: tokens from a real in-process ``AsyncLLM`` (tiny model, CPU).

``SOAK_BACKEND=vllm uvicorn tests.proof.apps.soak_fastapi:app`` starts the engine in the app's
lifespan (:func:`vllm_lifespan`) and makes every soak generator pull its tokens through the
SDK's integration, :class:`~llm_guard_sdk.vllm.VLLMGuard` registered on the app's guard. The
model is ``llm_guard_sdk.testing.tiny_model`` (built in ``SOAK_VLLM_MODEL`` or the cache).

What the soak asks of the engine, beside the generators' own counts:

- ``open``: the engine's own unfinished requests (``AsyncLLM.get_num_unfinished_requests()``,
  its output processor's table), which the soak waits to reach 0;
- ``engine_aborted``: requests the engine itself dropped on an abort. ``abort_requests`` of the
  engine's output processor is wrapped on this instance (test-only instrumentation, as
  benchmarks/vllm_abort.py does): it returns the ids it still held, the ones whose abort
  reached the engine core;
- ``abandoned``: engine streams closed before their last output (a reset, a frozen reader cut,
  an injected failure); each is either ``abandoned_aborted`` (the engine dropped its id on an
  abort) or ``abandoned_not_held`` (the engine did not hold it: finished with its last output
  unread, or never sent because the stream was closed before it started);
  ``aborted_unknown`` counts aborts of ids that no soak stream abandoned (must stay 0);
- ``POST /test/engine-probe``: one short request run to the end while a stat logger records the
  *scheduler's* running and waiting counts at each step (the engine core's own view, from
  another process): with nothing left behind they are at most 1 (the probe) and 0.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI

from llm_guard_sdk import Guard
from llm_guard_sdk.vllm import KVStats, VLLMGuard

PROMPT_IDS = (5, 6, 7, 8, 9, 10, 11, 12)
MAX_MODEL_LEN = 512  # prompt + the frozen readers' 300 tokens


class SchedulerPeaks(KVStats):
    """The scheduler stats, with the highest running and waiting counts since :meth:`reset`."""

    def __init__(self) -> None:
        super().__init__()
        self.peak_running = 0
        self.peak_waiting = 0
        self.steps = 0

    def update(self, scheduler_stats: Any) -> None:
        super().update(scheduler_stats)
        self.peak_running = max(self.peak_running, self.num_running_reqs)
        self.peak_waiting = max(self.peak_waiting, self.num_waiting_reqs)
        self.steps += 1

    def reset(self) -> None:
        self.peak_running = self.peak_waiting = self.steps = 0


class VLLMSoakBackend:
    """Soak tokens from ``vg``'s engine: one item per generated token, ``ignore_eos``."""

    def __init__(self, vg: VLLMGuard, peaks: SchedulerPeaks) -> None:
        self.vg = vg
        self.peaks = peaks
        self.started = self.closed = self.finished = 0
        self.abandoned = self.abandoned_aborted = self.abandoned_not_held = 0
        self.engine_aborted = 0
        self._dropped: set[str] = set()  # aborted ids not yet matched with their stream
        processor = vg.engine.output_processor
        original = processor.abort_requests

        def counted(request_ids: Any, *args: Any, **kwargs: Any) -> Any:
            # it returns the engine's internal ids: map them back to the ids we gave
            external = {internal: getattr(state, "external_req_id", internal)
                        for internal, state in processor.request_states.items()}
            dropped = original(request_ids, *args, **kwargs)
            self.engine_aborted += len(dropped)
            self._dropped.update(external.get(internal, internal) for internal in dropped)
            return dropped

        processor.abort_requests = counted

    async def generate(self, prompt: str, n: int) -> AsyncGenerator[str, None]:
        from vllm import SamplingParams

        self.started += 1
        request_id = f"soak-{self.started}"
        stream = self.vg.stream_outputs(list(PROMPT_IDS),
                                        SamplingParams(max_tokens=n, ignore_eos=True),
                                        request_id=request_id)
        done = False
        try:
            async for chunk in stream:
                for delta in chunk.outputs:
                    for token in delta.token_ids:
                        yield f" t{token}"
                done = chunk.finished
        finally:
            await stream.aclose()  # aborts the engine request unless it finished
            self.closed += 1
            self.finished += done
            aborted = request_id in self._dropped
            self._dropped.discard(request_id)
            if not done:
                self.abandoned += 1
                self.abandoned_aborted += aborted
                self.abandoned_not_held += not aborted

    def report(self) -> dict[str, Any]:
        vg = self.vg
        return {"started": self.started, "closed": self.closed, "finished": self.finished,
                "open": int(vg.engine.get_num_unfinished_requests()),
                "abandoned": self.abandoned, "abandoned_aborted": self.abandoned_aborted,
                "abandoned_not_held": self.abandoned_not_held,
                "engine_aborted": self.engine_aborted, "aborted_unknown": len(self._dropped),
                "sdk": {"requests": vg.requests_total, "completed": vg.completed_total,
                        "aborted": vg.aborted_total, "errors": vg.errors_total},
                "core_rss_bytes": core_rss()}

    async def probe(self, tokens: int = 4) -> dict[str, Any]:
        """Run one request to its end; the scheduler's peak counts while it ran."""
        self.peaks.reset()
        got = [token async for token in self.generate("probe", tokens)]
        return {"tokens": len(got), "steps": self.peaks.steps,
                "scheduler_peak_running": self.peaks.peak_running,
                "scheduler_peak_waiting": self.peaks.peak_waiting}


def core_rss() -> int:
    """RSS of this process's children: the engine core (reported apart from the server's)."""
    import psutil

    total = 0
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total


def vllm_lifespan(guard: Callable[[], Guard],
                  use: Callable[[VLLMSoakBackend], None]
                  ) -> Callable[[FastAPI], Any]:
    """A lifespan that starts the engine, hands its backend to ``use``, and stops it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from llm_guard_sdk.testing.engine import make_async_llm, shutdown_async_llm
        from llm_guard_sdk.testing.tiny_model import ensure_tiny_model

        peaks = SchedulerPeaks()
        engine = make_async_llm(ensure_tiny_model(os.environ.get("SOAK_VLLM_MODEL") or None),
                                stat_loggers=[peaks.logger_factory()],
                                max_model_len=MAX_MODEL_LEN, max_num_seqs=64,
                                disable_log_stats=False)
        soak = VLLMSoakBackend(VLLMGuard(engine, guard(), kv=peaks), peaks)
        use(soak)
        app.state.soak_vllm = soak
        try:
            yield
        finally:
            shutdown_async_llm(engine)

    return lifespan


router = APIRouter()


@router.post("/test/engine-probe")
async def engine_probe() -> dict[str, Any]:
    from tests.proof.apps import soak_common

    soak = soak_common.backend
    assert isinstance(soak, VLLMSoakBackend), "the vLLM soak backend is not in use"
    return await soak.probe()
