"""Which session (and which guard) the code running now belongs to.

The middleware binds both for the duration of a request, so a handler, a model wrapper or an
integration can find them without threading arguments through the app. The ASGI scope carries the
session too (:data:`SCOPE_KEY`), for code that sees the scope but runs outside the request's
context (Channels consumers, framework dependencies, other middleware).

Both live in **one** context variable holding a :class:`Binding`, an object with ``session`` and
``guard`` attributes: the middleware binds its connection object itself (:func:`bind`) and
later restores the binding it replaced (:func:`restore`: no token kept), so a request keeps one
context node and nothing else. An idle WebSocket keeps that for hours; two variables and their
tokens cost ~330 B per connection.
:func:`bind_session` and :func:`bind_guard` change one of the two and keep the other.

The guard is stored untyped here because this module sits below the guard in the layering (the
stream module reads the current session from here); :func:`llm_guard_sdk.guard.current_guard`
gives it back typed.
"""

from __future__ import annotations

import contextvars
from typing import Protocol

from llm_guard_sdk.session import Session

SCOPE_KEY = "llm_guard.session"
"""ASGI scope key under which the middleware also stores the connection's session."""


class Binding(Protocol):
    """What the context holds: the current session and guard (the middleware's connection)."""

    @property
    def session(self) -> Session | None: ...  # noqa: D102

    @property
    def guard(self) -> object | None: ...  # noqa: D102


class _Pair:
    """A binding made by :func:`bind_session` / :func:`bind_guard`."""

    __slots__ = ("guard", "session")

    def __init__(self, session: Session | None, guard: object | None) -> None:
        self.session = session
        self.guard = guard


_bound: contextvars.ContextVar[Binding | None] = contextvars.ContextVar(
    "llm_guard_bound", default=None
)

BindingToken = contextvars.Token[Binding | None]
SessionToken = BindingToken
GuardToken = BindingToken


def current_session() -> Session | None:
    """Return the session of the request being handled, or ``None`` outside the middleware."""
    binding = _bound.get()
    return None if binding is None else binding.session


def bound_guard() -> object | None:
    """The guard bound to this context, untyped; use ``llm_guard_sdk.current_guard()``."""
    binding = _bound.get()
    return None if binding is None else binding.guard


def bind(binding: Binding) -> Binding | None:
    """Make ``binding``'s session and guard current; returns the binding to :func:`restore`."""
    previous = _bound.get()
    _bound.set(binding)
    return previous


def restore(previous: Binding | None) -> None:
    """Undo :func:`bind`: make ``previous`` (what it returned) current again."""
    _bound.set(previous)


def bind_session(session: Session | None) -> SessionToken:
    """Make ``session`` current (the guard stays); undo with :func:`reset_session`."""
    return _bound.set(_Pair(session, bound_guard()))


def reset_session(token: SessionToken) -> None:
    """Undo :func:`bind_session`."""
    _bound.reset(token)


def bind_guard(guard: object) -> GuardToken:
    """Make ``guard`` current (the session stays); undo with :func:`reset_guard`."""
    return _bound.set(_Pair(current_session(), guard))


def reset_guard(token: GuardToken) -> None:
    """Undo :func:`bind_guard`."""
    _bound.reset(token)
