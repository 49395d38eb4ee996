"""Finding the connection's session from inside a framework's handler or consumer.

The middleware puts the session in the ASGI scope; frameworks that copy or rebuild the scope
still run the handler in the middleware's task, where the context variable holds it.
"""

from __future__ import annotations

from typing import Any

from llm_guard_sdk.context import SCOPE_KEY, current_session
from llm_guard_sdk.session import Session

MISSING_SESSION = (
    "no llm-guard session for this request: the guard middleware is not installed, or the "
    "path is exempt (LLM_GUARD_EXEMPT_PATHS); use the optional dependency there"
)
"""The error of the required-session dependencies (FastAPI, Litestar)."""


def session_from_scope(scope: Any) -> Session | None:
    """The connection's session: from the ASGI scope, else the current context."""
    session = scope.get(SCOPE_KEY) if scope is not None else None
    return session if isinstance(session, Session) else current_session()
