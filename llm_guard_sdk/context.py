"""Which session (and which guard) the code running now belongs to.

The middleware binds both for the duration of a request, so a handler, a model wrapper or an
integration can find them without threading arguments through the app. The ASGI scope carries the
session too (:data:`SCOPE_KEY`), for code that sees the scope but runs outside the request's
context (Channels consumers, framework dependencies, other middleware).

The guard is stored untyped here because this module sits below the guard in the layering (the
stream module reads the current session from here); :func:`llm_guard_sdk.guard.current_guard`
gives it back typed.
"""

from __future__ import annotations

import contextvars

from llm_guard_sdk.session import Session

SCOPE_KEY = "llm_guard.session"
"""ASGI scope key under which the middleware also stores the connection's session."""

_session: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "llm_guard_session", default=None
)
_guard: contextvars.ContextVar[object | None] = contextvars.ContextVar(
    "llm_guard_guard", default=None
)

SessionToken = contextvars.Token[Session | None]
GuardToken = contextvars.Token[object | None]


def current_session() -> Session | None:
    """Return the session of the request being handled, or ``None`` outside the middleware."""
    return _session.get()


def bind_session(session: Session | None) -> SessionToken:
    """Make ``session`` current for this context; undo with :func:`reset_session`."""
    return _session.set(session)


def reset_session(token: SessionToken) -> None:
    """Undo :func:`bind_session`."""
    _session.reset(token)


def bound_guard() -> object | None:
    """The guard bound to this context, untyped; use ``llm_guard_sdk.current_guard()``."""
    return _guard.get()


def bind_guard(guard: object) -> GuardToken:
    """Make ``guard`` the current guard for this context; undo with :func:`reset_guard`."""
    return _guard.set(guard)


def reset_guard(token: GuardToken) -> None:
    """Undo :func:`bind_guard`."""
    _guard.reset(token)
