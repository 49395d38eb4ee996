"""Every live guard, for tools that must follow guards an app builds at import time.

A deliberate module-level registry: the pytest leak plugin hooks each guard without the app's
cooperation. It is weak, so it never keeps a guard alive, and it sits below ``guard.py`` (which
announces each new guard here and re-exports :func:`watch_guards`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

_live_guards: weakref.WeakSet[Any] = weakref.WeakSet()
_guard_watchers: list[Callable[[Any], None]] = []


def watch_guards(watcher: Callable[[Any], None]) -> Callable[[], None]:
    """Call ``watcher(guard)`` for every live guard now and for every guard created later.

    Returns a function that stops watching.
    """
    _guard_watchers.append(watcher)
    for guard in list(_live_guards):
        watcher(guard)

    def stop() -> None:
        with contextlib.suppress(ValueError):
            _guard_watchers.remove(watcher)

    return stop


def announce(guard: Any, on_error: Callable[[str], None]) -> None:
    """Register a new guard and show it to every watcher; a failing watcher calls ``on_error``."""
    _live_guards.add(guard)
    for watcher in tuple(_guard_watchers):
        try:
            watcher(guard)
        except Exception:
            on_error("guard watcher")
