"""What a remote model server's failure means to the client and to the circuit breaker.

The same contract as the in-process engine (``docs/vllm.md#errors``): the server's own request
validation (4xx) is the client's fault and keeps its status and first line; a server that
cannot be reached, refuses connections or answers 5xx is a 503 with ``Retry-After``; a server
too slow for the read timeout is a 504; garbage or a stream cut mid-way is a 502. Messages never
carry prompt text or a traceback. Each error comes with the failure kind the breaker records
(None: the server works, the request was bad).
"""

from __future__ import annotations

import json

import httpx

from llm_guard_sdk.errors import BackendError, BackendUnavailableError, InvalidRequestError

__all__ = ["RemoteFailure", "http_error", "transport_error"]


class RemoteFailure:
    """A mapped failure: the error to raise and the breaker's failure kind (None: not one)."""

    __slots__ = ("error", "kind")

    def __init__(self, error: BackendError, kind: str | None) -> None:
        self.error, self.kind = error, kind


def _with_status(error: BackendError, status: int) -> BackendError:
    error.status = status
    return error


def unavailable(message: str, reason: str, retry_after: int) -> BackendUnavailableError:
    """A 503 with ``Retry-After``: the server is down, refusing or failing."""
    return BackendUnavailableError(message, reason=reason, retry_after=retry_after)


def transport_error(exc: httpx.HTTPError, where: str, retry_after: int) -> RemoteFailure:
    """Map an httpx exception raised while connecting or reading (``where``: the server)."""
    if isinstance(exc, httpx.ConnectError):  # refused, unresolvable, unreachable
        return RemoteFailure(unavailable(f"the model server {where} is unreachable; retry later",
                                         "remote_unreachable", retry_after), "dead")
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return RemoteFailure(unavailable(f"the model server {where} did not accept the "
                                         "connection in time; retry later",
                                         "remote_unreachable", retry_after), "timeout")
    if isinstance(exc, httpx.TimeoutException):  # read or write: too slow mid-request
        return RemoteFailure(_with_status(BackendError(
            f"the model server {where} did not answer in time", reason="remote_timeout"),
            504), "timeout")
    if isinstance(exc, httpx.DecodingError):
        return RemoteFailure(_with_status(BackendError(
            f"the model server {where} sent an undecodable body", reason="remote_protocol"),
            502), "error")
    # RemoteProtocolError (closed mid-body), ReadError, WriteError, ...: cut mid-way.
    return RemoteFailure(_with_status(BackendError(
        f"the model server {where} closed the stream before it finished",
        reason="remote_incomplete"), 502), "error")


def error_message(body: bytes, status: int) -> str:
    """The server's own message (OpenAI's ``{"error": {"message"}}``), first line, short."""
    text = ""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error", doc)
        found = error.get("message") if isinstance(error, dict) else error
        text = found if isinstance(found, str) else ""
    text = text.strip().splitlines()[0][:300] if text.strip() else ""
    return text or f"the model server refused the request (HTTP {status})"


def http_error(status: int, body: bytes, where: str, retry_after: int) -> RemoteFailure:
    """Map a non-2xx answer (or an error object in the stream, with its ``code``)."""
    if status in (401, 403):  # our credentials, not the client's request
        return RemoteFailure(_with_status(BackendError(
            f"the model server {where} refused this service's credentials",
            reason="remote_auth"), 502), "error")
    if status in (408, 429):
        return RemoteFailure(unavailable(f"the model server {where} is busy; retry later",
                                         "remote_overloaded", retry_after), None)
    if 400 <= status < 500:
        return RemoteFailure(_with_status(InvalidRequestError(error_message(body, status)),
                                          status), None)
    return RemoteFailure(unavailable(f"the model server {where} failed (HTTP {status}); "
                                     "retry later", "remote_error", retry_after), "error")
