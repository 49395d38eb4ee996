"""Exceptions raised by llm-guard-sdk."""

from __future__ import annotations


class GuardError(Exception):
    """Base class so callers can catch everything the SDK raises on purpose."""


class ConfigError(GuardError, ValueError):
    """An invalid setting; raised at start-up so a bad deploy fails before traffic arrives."""


class MissingDependencyError(GuardError, ImportError):
    """An optional extra is not installed; the message carries the exact pip command."""

    def __init__(self, what: str, extra: str, *, command: str | None = None) -> None:
        self.extra = extra
        self.command = command or f"pip install 'llm-guard-sdk[{extra}]'"
        super().__init__(f"{what} is not installed. Install it with: {self.command}")


class PeerGoneError(GuardError, OSError):
    """A send to the client was abandoned: it stalled past ``send_timeout`` (a dead peer).

    An ``OSError``, as ASGI 2.4 servers raise on a send to a closed connection, so frameworks and
    the adapters end the response or the WebSocket loop the way they do for a gone client.
    """


class BackendError(GuardError):
    """A model backend refused or failed a request; ``status`` is the HTTP status to answer.

    The message is safe to show the client: it never contains prompt or completion text, nor a
    traceback. ``reason`` (machine-readable) and ``retry_after`` (seconds) are optional; the
    adapters answer :meth:`document` with :meth:`headers`.
    """

    status = 500

    def __init__(self, message: str, *, reason: str | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.retry_after = retry_after

    def document(self) -> dict[str, object]:
        """The JSON body: ``{"error"}``, plus ``reason`` and ``retry_after`` when set."""
        doc: dict[str, object] = {"error": self.message}
        if self.reason is not None:
            doc["reason"] = self.reason
        if self.retry_after is not None:
            doc["retry_after"] = self.retry_after
        return doc

    def headers(self) -> dict[str, str]:
        """Response headers: ``Retry-After`` when set."""
        return {} if self.retry_after is None else {"retry-after": str(self.retry_after)}


class InvalidRequestError(BackendError):
    """The backend rejected the request (prompt too long, bad sampling parameters)."""

    status = 400


class DuplicateRequestError(BackendError):
    """A caller-chosen request id is already streaming."""

    status = 409


class BackendUnavailableError(BackendError):
    """The backend cannot serve (its engine died); retrying elsewhere may work."""

    status = 503


class BackendOverloadedError(BackendError):
    """The backend is too full to take this request now (e.g. its KV cache); retry later."""

    status = 503


class InvalidHistoryError(InvalidRequestError, ValueError):
    """A conversation history that is not a list of ``{"role", "content"}`` messages.

    An HTTP endpoint answers it as 400 (it is an :class:`InvalidRequestError`, so the adapters'
    ``wait_first`` path does that by itself); the WebSocket chat closes with 1003 and the
    message as the reason. A ValueError too, so a chat handler raising it is a bad request.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="invalid_history")
