"""The core hook the leak tools need: ``watch_guards`` (every live and future guard)."""

from __future__ import annotations

from collections.abc import Callable

from llm_guard_sdk import Guard, GuardConfig
from llm_guard_sdk import guard as guard_module
from llm_guard_sdk.guard import watch_guards


def make() -> Guard:
    return Guard(GuardConfig(sources=("process",)))


def test_watch_guards_sees_live_and_new_guards_until_stopped() -> None:
    before = make()
    seen: list[Guard] = []
    stop = watch_guards(seen.append)
    assert before in seen  # live guards are reported at once
    after = make()
    assert seen[-1] is after
    stop()
    stop()  # idempotent
    make()
    assert seen[-1] is after


def test_a_failing_watcher_does_not_break_guard_creation() -> None:
    called: list[Guard] = []

    def broken(guard: Guard) -> None:
        called.append(guard)
        raise RuntimeError("watcher bug")

    remove = _register_for_new_guards_only(broken)
    try:
        guard = make()
    finally:
        remove()
    assert called == [guard]
    assert guard.internal_errors_total == 1


def _register_for_new_guards_only(watcher: Callable[[Guard], None]) -> Callable[[], None]:
    """``watch_guards`` would call a raising watcher on live guards at once; skip that."""
    guard_module._guard_watchers.append(watcher)
    return lambda: guard_module._guard_watchers.remove(watcher)
