"""llm-guard-sdk: keeps LLM streaming servers alive.

Add one line, ``app.add_middleware(GuardMiddleware)``, and wrap model generators with
:func:`guard_stream`. The core imports no web framework; adapters live in
``llm_guard_sdk.adapters.<framework>``.
"""

from llm_guard_sdk.asgi.middleware import GuardMiddleware
from llm_guard_sdk.config import GuardConfig, parse_size
from llm_guard_sdk.context import current_session
from llm_guard_sdk.errors import ConfigError, GuardError, MissingDependencyError
from llm_guard_sdk.guard import Guard, current_guard
from llm_guard_sdk.monitors.base import MemorySource, Reading
from llm_guard_sdk.policy import Level
from llm_guard_sdk.session import CloseReason, Session, SessionState
from llm_guard_sdk.stream import GuardedStream, guard_stream

__all__ = [
    "CloseReason",
    "ConfigError",
    "Guard",
    "GuardConfig",
    "GuardError",
    "GuardMiddleware",
    "GuardedStream",
    "Level",
    "MemorySource",
    "MissingDependencyError",
    "Reading",
    "Session",
    "SessionState",
    "current_guard",
    "current_session",
    "guard_stream",
    "parse_size",
]

__version__ = "0.1.0"
