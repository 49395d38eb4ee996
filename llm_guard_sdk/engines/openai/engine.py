"""Streaming from an OpenAI-compatible server (``vllm serve``, TGI, ...) under the guard.

Most fleets run ``vllm serve`` replicas and stream from them over HTTP. :class:`RemoteEngine`
sends one streaming ``/v1/completions`` or ``/v1/chat/completions`` request per stream, through
an ``httpx.AsyncClient`` (given, or owned and closed by :meth:`RemoteEngine.aclose`), and yields
the text deltas of choice 0 inside :func:`~llm_guard_sdk.guard_stream`, so the session owns it
like an in-process engine's stream. On every way out that is not the server's ``[DONE]`` — the
client gone, an eviction, a timeout, an error — the HTTP exchange (run by a
:class:`~.transport.ResponsePump` task, so no second cancellation of the consumer can interrupt
its clean-up) is cancelled and its response closed at once; httpx drops a connection whose body
was not read to the end, which is how the remote server learns to abort the request. What the
stream buffers (the chunks read ahead, an incomplete SSE event) is declared as held bytes.

Failures map as for the in-process engine (:mod:`.errors`) and, when the guard has the
``breakers`` extension, feed the breaker named after this engine (a refused connection trips
it; an open breaker refuses new streams with 503 before any connection is made).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx

from llm_guard_sdk.breakers import BreakerOpenError, Breakers, CircuitBreaker
from llm_guard_sdk.errors import BackendError, InvalidRequestError
from llm_guard_sdk.guard import Guard, current_guard
from llm_guard_sdk.session import Session
from llm_guard_sdk.stream import GuardedStream, guard_stream

from .errors import RemoteFailure, http_error, transport_error
from .events import DONE, MAX_EVENT_BYTES, SSEDecoder, protocol_error, read_event
from .request import request_body
from .transport import ResponsePump

__all__ = ["DEFAULT_TIMEOUT", "RemoteEngine", "stream_openai"]

DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=60.0, write=10.0, pool=5.0)
"""Connect 5 s, 60 s between two chunks (a queued request's first token included), pool 5 s."""

class _Held:
    """What one remote stream buffers: the chunk read ahead and the incomplete SSE event."""

    __slots__ = ("decoder", "pump")

    def __init__(self, decoder: SSEDecoder) -> None:
        self.decoder = decoder
        self.pump: ResponsePump | None = None

    def nbytes(self) -> int:
        queued = self.pump.queued_bytes if self.pump is not None else 0
        return queued + self.decoder.buffered_bytes


class RemoteEngine:
    """One OpenAI-compatible server (``base_url`` such as ``http://host:8000/v1``) and model.

    Args:
        base_url: The API root, up to and including ``/v1``.
        model: The served model name sent with every request.
        client: An ``httpx.AsyncClient`` to use (its pool, auth, TLS); None: one is created and
            owned, closed by :meth:`aclose`.
        timeout: Per-request httpx timeouts (read is per chunk); None: :data:`DEFAULT_TIMEOUT`
            for an owned client, the client's own otherwise.
        guard: Register on this guard (status section ``name``, its breaker); without one,
            the guard serving the request is used for the breaker.
        name: Extension, status and breaker name (one per remote engine on a guard).
        headers: Sent with every request (e.g. ``Authorization``).
        retry_after: ``Retry-After`` of a 503; None: the guard's ``retry_after`` (else 5).
        max_event_bytes: An SSE event longer than this is refused as garbage.

    Attributes:
        open_streams: HTTP responses open now (0 once every stream ended).
    """

    def __init__(self, base_url: str, model: str, *, client: httpx.AsyncClient | None = None,
                 timeout: httpx.Timeout | float | None = None, guard: Guard | None = None,
                 name: str = "remote", headers: Mapping[str, str] | None = None,
                 retry_after: int | None = None,
                 max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, "
                             f"got {base_url!r}")
        if not isinstance(model, str) or not model:
            raise ValueError("model must be the served model name")
        self.base_url = str(base_url).rstrip("/")
        self.where = f"{url.host}:{url.port or (443 if url.scheme == 'https' else 80)}"
        self.model = model
        self.name = name
        self.owns_client = client is None
        if timeout is None and client is None:
            timeout = DEFAULT_TIMEOUT
        self.client = client if client is not None else httpx.AsyncClient(timeout=timeout)
        self.timeout = timeout
        self.headers = dict(headers or {})
        self.retry_after = retry_after
        self.max_event_bytes = max_event_bytes
        self.guard: Guard | None = None
        self.open_streams = 0
        self.requests_total = 0
        self.completed_total = 0
        self.aborted_total = 0
        self.errors_total = 0
        self.errors_by_status: dict[int, int] = {}
        if guard is not None:
            guard.add_extension(self)

    def setup(self, guard: Guard) -> None:
        """Serve this engine's status section on ``guard``."""
        self.guard = guard
        guard.add_status_section(self.name, self.status)

    def stream(self, prompt: str | Sequence[int] | None = None, *,
               messages: Sequence[Mapping[str, Any]] | None = None,
               max_tokens: int | None = None, params: Mapping[str, Any] | None = None,
               request_id: str | None = None,
               session: Session | None = None) -> GuardedStream[str]:
        """Stream text deltas for ``prompt`` (``/completions``) or ``messages`` (``/chat``).

        ``params`` are further body fields (``temperature``, ``stop``, vLLM's ``ignore_eos``,
        ...). ``request_id`` is sent as ``X-Request-Id`` (vLLM names its request after it).

        Raises:
            InvalidRequestError: bad arguments (at once); while iterating, the server's 4xx.
            BackendError: while iterating: 503 unreachable/5xx/circuit open, 504 too slow,
                502 garbage or a stream cut mid-way.
        """
        path, body = request_body(self.model, prompt, messages, max_tokens, params)
        rid = request_id if request_id is not None else "llmg-" + secrets.token_hex(12)
        if not (0 < len(rid) <= 128 and all("!" <= c <= "~" for c in rid)):
            raise InvalidRequestError("request_id must be 1-128 printable ASCII characters")
        held = _Held(SSEDecoder(self.max_event_bytes))
        self.requests_total += 1
        return guard_stream(self._generate(path, body, rid, held), session=session,
                            name=self.name, held=held.nbytes)

    async def aclose(self) -> None:
        """Close the client if this engine created it."""
        if self.owns_client:
            await self.client.aclose()

    def status(self) -> dict[str, Any]:
        """This engine's status section."""
        return {
            "server": self.where,
            "model": self.model,
            "open_streams": self.open_streams,
            "requests_total": self.requests_total,
            "completed_total": self.completed_total,
            "aborted_total": self.aborted_total,
            "errors_total": self.errors_total,
            "errors_by_status": {str(k): v for k, v in sorted(self.errors_by_status.items())},
        }

    def breaker(self) -> CircuitBreaker | None:
        """This engine's breaker, when the serving guard has the ``breakers`` extension."""
        guard = self.guard if self.guard is not None else current_guard()
        if guard is None or not isinstance(guard.extension(Breakers.name), Breakers):
            return None
        return Breakers.of(guard).get(self.name)

    def _retry_after(self) -> int:
        if self.retry_after is not None:
            return self.retry_after
        guard = self.guard if self.guard is not None else current_guard()
        return guard.config.retry_after if guard is not None else 5

    async def _generate(self, path: str, body: dict[str, Any], rid: str,
                        held: _Held) -> AsyncIterator[str]:
        breaker = self.breaker()
        if breaker is not None and not breaker.allow():
            refusal = BreakerOpenError(breaker.name, breaker.retry_after())
            self._count_error(refusal.status)  # the client got an error, nothing was sent
            raise refusal
        failure: RemoteFailure | None = None
        request = self.client.build_request(
            "POST", self.base_url + path, json=body,
            headers={**self.headers, "accept": "text/event-stream", "x-request-id": rid},
            timeout=httpx.USE_CLIENT_DEFAULT if self.timeout is None else self.timeout)
        pump = ResponsePump(self.client, request, on_open=self._opened, on_close=self._closed)
        held.pump = pump
        answered = done = False
        try:
            try:
                head = await pump.head()
                answered = True
                if head.status >= 400:
                    failure = http_error(head.status, head.body, self.where, self._retry_after())
                    raise failure.error
                if "text/event-stream" not in head.content_type:
                    failure = RemoteFailure(protocol_error("not an event stream"), "error")
                    raise failure.error
                while not done and (chunk := await pump.chunk()) is not None:
                    for data in held.decoder.feed(chunk):
                        if data == DONE:
                            done = True
                            break
                        event = read_event(data)
                        if event.error is not None:
                            failure = _stream_error(event.error, self.where, self._retry_after())
                            raise failure.error
                        if event.text:
                            yield event.text
            except httpx.HTTPError as exc:
                failure = transport_error(exc, self.where, self._retry_after())
                raise failure.error from None
            except BackendError as exc:
                failure = failure if failure is not None else RemoteFailure(exc, "error")
                raise
            if not done:  # the body ended without [DONE]: the server went away mid-stream
                failure = transport_error(httpx.RemoteProtocolError("no [DONE]"), self.where,
                                          self._retry_after())
                raise failure.error
        finally:
            held.decoder.clear()
            self._settle(breaker, failure, answered=answered, done=done)  # before any await
            await pump.close()  # an unfinished response drops its connection: the server aborts

    def _opened(self) -> None:
        self.open_streams += 1

    def _closed(self) -> None:
        self.open_streams -= 1

    def _settle(self, breaker: CircuitBreaker | None, failure: RemoteFailure | None, *,
                answered: bool, done: bool) -> None:
        """Count the outcome once and tell the breaker what it says about the server."""
        if failure is not None:
            self._count_error(failure.error.status)
        elif done:
            self.completed_total += 1
        else:
            self.aborted_total += 1
        if breaker is None:
            return
        if failure is not None and failure.kind is not None:
            breaker.record_failure(failure.kind)
        elif answered:
            breaker.record_success()
        else:
            breaker.release()


    def _count_error(self, status: int) -> None:
        self.errors_total += 1
        self.errors_by_status[status] = self.errors_by_status.get(status, 0) + 1


def _stream_error(error: Mapping[str, Any], where: str, retry_after: int) -> RemoteFailure:
    """An error object sent after the 200 (vLLM does so): mapped by its ``code``."""
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    return http_error(status, json.dumps({"error": dict(error)}).encode(), where, retry_after)


def stream_openai(engine: RemoteEngine, prompt: str | Sequence[int] | None = None, *,
                  messages: Sequence[Mapping[str, Any]] | None = None,
                  max_tokens: int | None = None, params: Mapping[str, Any] | None = None,
                  request_id: str | None = None,
                  session: Session | None = None) -> GuardedStream[str]:
    """Stream text deltas from ``engine``'s server; the HTTP stream closes with the session.

    The counterpart of :func:`~llm_guard_sdk.vllm.stream_vllm` for a remote server; see
    :meth:`RemoteEngine.stream`.
    """
    return engine.stream(prompt, messages=messages, max_tokens=max_tokens, params=params,
                         request_id=request_id, session=session)
