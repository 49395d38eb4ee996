"""Streaming one engine's requests so that none outlives its consumer.

vLLM aborts a request when the consumer of ``AsyncLLM.generate`` is cancelled or closes it, but
nothing closes it when the client is gone and the framework does not notice (vllm#9428, #10087).
:class:`VLLMStreams` puts ``generate`` under :func:`~llm_guard_sdk.guard_stream`, aborts the
request on every path that does not end in ``finished``, and accounts the request's KV bytes to
its own guarded stream as tokens arrive (per stream, so a session's concurrent requests add up).

Errors reach the client as :class:`~llm_guard_sdk.errors.BackendError`: vLLM's own validation
errors as 400, a dead engine as 503, anything else as a 500 without internals (the traceback is
logged here, once). Each is counted by status.

Two seams let :class:`~llm_guard_sdk.engines.vllm.VLLMGuard` act per engine request without
this module knowing the guard: :meth:`VLLMStreams.degrade` (the degrade hook, when a stream is
created) and :meth:`VLLMStreams.breaker` (the circuit breaker asked before the engine is, told
how the request ended: finished, failed, or closed by a timeout).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio

from llm_guard_sdk.breakers import BreakerOpenError, CircuitBreaker
from llm_guard_sdk.context import current_session
from llm_guard_sdk.degrade import DegradeRequest
from llm_guard_sdk.errors import BackendError, DuplicateRequestError
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import GuardedStream, guard_stream

from .deps import vllm_errors
from .inputs import check_request_id, delta_params, engine_prompt, new_request_id
from .kv import kv_bytes_per_token
from .outputs import OutputChunk, UsageCounter, check_generate_kwargs

logger = logging.getLogger("llm_guard_sdk")


class _StreamKV:
    """Where a request reports its KV bytes: its guarded stream, known once it is wrapped."""

    __slots__ = ("stream",)

    def __init__(self) -> None:
        self.stream: GuardedStream[str] | None = None

    def set(self, nbytes: int) -> None:
        if self.stream is not None:
            self.stream.set_backend_bytes(nbytes)


class VLLMStreams:
    """The guarded streams of one ``AsyncLLM``, with their outcome counters.

    Attributes:
        engine: The ``AsyncLLM``.
        bytes_per_token: KV bytes one token holds (see :func:`kv_bytes_per_token`).
        requests_total: Streams created.
        completed_total: Requests vLLM finished normally.
        aborted_total: Requests aborted (by us, or finished with reason ``abort``), errors aside.
        errors_total: Requests that ended in an error (rejected, dead engine, engine failure).
        errors_by_status: ``errors_total`` by the HTTP status the client got.
        fallbacks: Other engines by model name, for a degrade hook that switches the model
            (a name not here is ignored: the request goes to :attr:`engine`).
    """

    def __init__(self, engine: Any, *, fallbacks: Mapping[str, Any] | None = None) -> None:
        self.engine = engine
        self.fallbacks = dict(fallbacks or {})
        self.bytes_per_token = kv_bytes_per_token(engine)
        self.requests_total = 0
        self.completed_total = 0
        self.aborted_total = 0
        self.errors_total = 0
        self.errors_by_status: dict[int, int] = {}
        self._inflight: dict[str, Any] = {}  # request id -> the engine serving it

    def admission_error(self) -> BackendError | None:
        """Why a stream about to start must not reach the engine now, or None to let it.

        Asked when the stream starts (its first iteration); :class:`VLLMGuard` refuses while
        the KV cache is under pressure. Without a guard nothing is refused.
        """
        return None

    def breaker(self) -> CircuitBreaker | None:
        """The circuit breaker of this engine, or None (:class:`VLLMGuard`: the guard's)."""
        return None

    def degrade(self, request: DegradeRequest) -> DegradeRequest:
        """What to send instead of ``request``; :class:`VLLMGuard` asks the degrade hook."""
        return request

    @property
    def model_name(self) -> str | None:
        """The served model's name, as the degrade hook sees it."""
        name = getattr(getattr(self.engine, "model_config", None), "model", None)
        return name if isinstance(name, str) else None

    def inflight_ids(self) -> tuple[str, ...]:
        """Ids of the requests streaming now (started and not yet ended)."""
        return tuple(self._inflight)

    def unfinished(self) -> int:
        """Requests the engine still holds (its own count)."""
        try:
            return int(self.engine.get_num_unfinished_requests())
        except Exception:
            return len(self._inflight)

    def stream(self, prompt: str | Sequence[int] | None = None, sampling_params: Any = None, *,
               request_id: str | None = None, messages: Sequence[dict[str, str]] | None = None,
               session: Session | None = None, **generate_kwargs: Any) -> GuardedStream[str]:
        """Stream text deltas for ``prompt`` (text or token ids) or chat ``messages``.

        ``generate_kwargs`` (``lora_request``, ``priority``, ``trace_headers``, ...) go to
        ``AsyncLLM.generate`` as they are; a name the installed vLLM does not take is a
        ``TypeError`` here.

        Raises:
            DuplicateRequestError: ``request_id`` is already streaming.
            InvalidRequestError: bad arguments; later, while iterating, anything vLLM rejects.
            BackendUnavailableError: while iterating, when the engine died.
        """
        return self._stream(prompt, sampling_params, request_id, messages, session,
                            generate_kwargs, full=False)

    def stream_outputs(self, prompt: str | Sequence[int] | None = None,
                       sampling_params: Any = None, *, request_id: str | None = None,
                       messages: Sequence[dict[str, str]] | None = None,
                       session: Session | None = None,
                       **generate_kwargs: Any) -> GuardedStream[OutputChunk]:
        """Like :meth:`stream`, but each item is an :class:`OutputChunk`.

        Each chunk has every one of the ``n`` completions' new text and token ids, their
        finish reasons and cumulative usage counts.
        """
        return self._stream(prompt, sampling_params, request_id, messages, session,
                            generate_kwargs, full=True)

    def _stream(self, prompt: str | Sequence[int] | None, sampling_params: Any,
                request_id: str | None, messages: Sequence[dict[str, str]] | None,
                session: Session | None, generate_kwargs: dict[str, Any], *,
                full: bool) -> GuardedStream[Any]:
        rid = check_request_id(request_id) if request_id is not None else new_request_id()
        if rid in self._inflight:
            raise DuplicateRequestError(f"request id {rid!r} is already streaming")
        params = delta_params(sampling_params)
        asked = DegradeRequest(max_tokens=getattr(params, "max_tokens", None), prompt=prompt,
                               messages=messages, model=self.model_name, backend="vllm")
        sent = self.degrade(asked)
        engine = self.fallbacks.get(sent.model, self.engine) if sent.model else self.engine
        extra = check_generate_kwargs(engine, generate_kwargs)
        prompt_input = engine_prompt(engine, sent.prompt, sent.messages)
        if sent.max_tokens != asked.max_tokens:
            params.max_tokens = sent.max_tokens
        bound = session if session is not None else current_session()
        self.requests_total += 1
        kv = _StreamKV()
        stream = guard_stream(self._generate(engine, prompt_input, params, rid, kv, extra, full),
                              session=bound, name="vllm")
        kv.stream = stream
        return stream

    async def abort(self, request_id: str) -> bool:
        """Abort a request by id; False when it is not ours or already done."""
        engine = self._inflight.get(request_id)
        if engine is None:
            return False
        await engine.abort(request_id)
        return True

    def _admit(self, rid: str) -> CircuitBreaker | None:
        """Raise why the request must not reach the engine; return the breaker that allowed it.

        The breaker is asked first (open: 503 ``circuit_open``, the engine untouched); a request
        it let through and that is then refused gives its slot back, or trips it (dead engine).
        """
        breaker = self.breaker()
        if breaker is not None and not breaker.allow():
            raise self.refused(BreakerOpenError(breaker.name, breaker.retry_after()))
        refusal = self.admission_error()
        if refusal is None and rid in self._inflight:  # one id twice before either started
            refusal = DuplicateRequestError(f"request id {rid!r} is already streaming")
        if refusal is not None:
            if breaker is not None and refusal.reason == "engine_dead":
                breaker.trip("dead")
            elif breaker is not None:
                breaker.release()  # the engine is busy, not failing (or the caller erred)
            raise refusal  # before the engine saw it: nothing to abort
        return breaker

    def refused(self, error: BackendError) -> BackendError:
        """Count a refused engine request (:class:`VLLMGuard` keeps counts by reason)."""
        return error

    async def _generate(self, engine: Any, prompt: dict[str, Any], params: Any, rid: str,
                        kv: _StreamKV, extra: dict[str, Any] | None = None,
                        full: bool = False) -> AsyncIterator[Any]:
        errors = vllm_errors()
        breaker = self._admit(rid)
        # Registered only once running: a stream closed before it starts never reaches here.
        self._inflight[rid] = engine
        finished = errored = False
        failure: str | None = None
        usage = UsageCounter(rid)
        per_token = self.bytes_per_token
        try:
            async for out in engine.generate(prompt, params, rid, **(extra or {})):
                completion = out.outputs[0] if out.outputs else None
                kv.set(usage.count(out) * per_token)  # every one of the n completions holds KV
                if out.finished:
                    finished = True
                    if completion is not None and completion.finish_reason == "abort":
                        self.aborted_total += 1
                    else:
                        self.completed_total += 1
                if full:
                    yield usage.chunk(out)
                elif completion is not None and completion.text:
                    yield completion.text
        except Exception as exc:
            errored = True
            error = errors.client_error(exc)
            if isinstance(exc, errors.dead):
                failure = "dead"
            elif error.status >= 500:
                failure = "error"
            self.errors_total += 1
            self.errors_by_status[error.status] = self.errors_by_status.get(error.status, 0) + 1
            if error.reason == "engine_error":  # unexpected: keep the traceback, server-side
                logger.error("vLLM request %s failed: %s", rid, type(exc).__name__,
                             exc_info=exc)
            raise error from None
        finally:
            self._inflight.pop(rid, None)
            kv.set(0)
            if breaker is not None:
                stopped = kv.stream.stop_reason if kv.stream is not None else None
                if stopped is CloseReason.TIMEOUT:  # the guard cut a stalled request
                    failure = "timeout"
                if failure is not None:
                    breaker.record_failure(failure)
                elif finished:
                    breaker.record_success()
                else:  # the client went, or a 4xx: says nothing about the engine
                    breaker.release()
            if not finished:
                # Every unfinished way out, before the first token too. aclose()/cancellation
                # already make vLLM abort; this covers the rest (an error, a consumer that
                # stopped without either); aborting an id vLLM never queued is a no-op.
                # Shielded: under an anyio cancel scope every await would otherwise be
                # cancelled again before the abort is sent.
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await engine.abort(rid)  # a dead engine holds nothing to abort
                if not errored:
                    self.aborted_total += 1
