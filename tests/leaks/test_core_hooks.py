"""The core hook the leak tools need: ``watch_guards`` (every live and future guard)."""

from __future__ import annotations

from llm_guard_sdk import Guard, GuardConfig
from llm_guard_sdk.guard import watch_guards


def make() -> Guard:
    return Guard(GuardConfig.defaults(sources=("process",)))


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
    armed = False  # live guards are reported during registration: let those pass

    def broken(guard: Guard) -> None:
        if armed:
            called.append(guard)
            raise RuntimeError("watcher bug")

    stop = watch_guards(broken)
    armed = True
    try:
        guard = make()
    finally:
        stop()
    assert called == [guard]
    assert guard.internal_errors_total == 1
