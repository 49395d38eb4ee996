from __future__ import annotations

import time
from typing import Any

import pytest

from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import CloseReason, Session, SessionState
from llm_guard_sdk.stream import GuardedStream


class EmptySource:
    """An async iterator that never needs closing (no aclose, no frame)."""

    def __aiter__(self) -> EmptySource:
        return self

    async def __anext__(self) -> Any:
        raise StopAsyncIteration


def open_stream(session: Session) -> GuardedStream[Any]:
    # Constructing a GuardedStream registers it with the session's registry (stream_opened).
    return GuardedStream(EmptySource(), session)


def close(registry: SessionRegistry, session: Session, reason: CloseReason) -> bool:
    started = registry.start_closing(session, reason)
    registry.forget(session)
    return started


# -- open / close counters -----------------------------------------------------------------


def test_open_and_close_counters() -> None:
    registry = SessionRegistry(max_sessions=10)
    a = registry.open("http", "/a")
    b = registry.open("websocket", "/b")
    assert len(registry) == 2
    assert registry.counters.opened_total == 2
    assert registry.counters.closed_total == 0
    assert registry.get(a.id) is a
    assert set(registry) == {a, b}
    assert a.path == "/a"

    assert close(registry, a, CloseReason.COMPLETED)
    assert registry.get(a.id) is None
    assert len(registry) == 1
    assert registry.counters.closed_total == 1
    assert a.state is SessionState.CLOSED
    assert a.close_reason is CloseReason.COMPLETED

    close(registry, b, CloseReason.DISCONNECTED)
    assert len(registry) == 0
    assert registry.counters.opened_total == 2
    assert registry.counters.closed_total == 2


def test_session_ids_are_unique() -> None:
    registry = SessionRegistry(max_sessions=1000)
    ids = {registry.open("http").id for _ in range(200)}
    assert len(ids) == 200
    assert all(i.startswith("sess-") for i in ids)


def test_websocket_starts_idle_http_starts_active() -> None:
    registry = SessionRegistry(max_sessions=10)
    ws = registry.open("websocket")
    http = registry.open("http")
    assert ws.state is SessionState.IDLE
    assert http.state is SessionState.ACTIVE
    assert registry.idle_count == 1
    assert list(registry.idle_lru()) == [ws]
    assert registry.summary()["idle"] == 1
    assert registry.summary()["active"] == 1


# -- stream open / close -------------------------------------------------------------------


def test_stream_opened_and_closed_moves_websocket_in_and_out_of_idle() -> None:
    registry = SessionRegistry(max_sessions=10)
    ws = registry.open("websocket")
    stream = open_stream(ws)
    assert ws.state is SessionState.ACTIVE
    assert registry.idle_count == 0
    assert registry.streams_open == 1
    assert registry.counters.streams_opened_total == 1
    assert list(registry.largest_streams()) == [ws]

    ws.remove_stream(stream, CloseReason.COMPLETED)
    assert ws.state is SessionState.IDLE
    assert list(registry.idle_lru()) == [ws]
    assert registry.streams_open == 0
    assert registry.counters.streams_completed_total == 1
    assert list(registry.largest_streams()) == []


def test_websocket_stays_active_while_another_stream_is_open() -> None:
    registry = SessionRegistry(max_sessions=10)
    ws = registry.open("websocket")
    s1, s2 = open_stream(ws), open_stream(ws)
    assert registry.streams_open == 2
    ws.remove_stream(s1, CloseReason.COMPLETED)
    assert ws.state is SessionState.ACTIVE
    assert registry.idle_count == 0
    ws.remove_stream(s2, CloseReason.COMPLETED)
    assert ws.state is SessionState.IDLE


def test_http_session_never_becomes_idle() -> None:
    registry = SessionRegistry(max_sessions=10)
    http = registry.open("http")
    stream = open_stream(http)
    http.remove_stream(stream, CloseReason.COMPLETED)
    assert http.state is SessionState.ACTIVE
    assert registry.idle_count == 0


@pytest.mark.parametrize(
    ("reason", "counter"),
    [
        (CloseReason.COMPLETED, "streams_completed_total"),
        (CloseReason.DISCONNECTED, "streams_disconnected_total"),
        (CloseReason.EVICTED, "streams_aborted_total"),
        (CloseReason.TIMEOUT, "streams_aborted_total"),
        (CloseReason.ERROR, "streams_aborted_total"),
        (CloseReason.IDLE_TIMEOUT, "streams_aborted_total"),
    ],
)
def test_stream_close_reason_counters(reason: CloseReason, counter: str) -> None:
    registry = SessionRegistry(max_sessions=10)
    session = registry.open("http")
    stream = open_stream(session)
    session.remove_stream(stream, reason)
    counters = registry.counters
    names = ("streams_completed_total", "streams_disconnected_total", "streams_aborted_total")
    assert {n: getattr(counters, n) for n in names} == {n: int(n == counter) for n in names}


# -- idle LRU ------------------------------------------------------------------------------


def test_idle_lru_follows_touch() -> None:
    registry = SessionRegistry(max_sessions=10)
    a, b, c = (registry.open("websocket") for _ in range(3))
    assert list(registry.idle_lru()) == [a, b, c]
    registry.touch(a)
    assert list(registry.idle_lru()) == [b, c, a]
    registry.touch(c)
    assert list(registry.idle_lru()) == [b, a, c]
    registry.touch(c)  # already newest
    assert list(registry.idle_lru()) == [b, a, c]


def test_touch_updates_last_activity_and_ignores_active_sessions() -> None:
    registry = SessionRegistry(max_sessions=10)
    ws = registry.open("websocket")
    http = registry.open("http")
    ws.last_activity = http.last_activity = time.monotonic() - 100
    registry.touch(ws)
    registry.touch(http)
    assert ws.idle_for < 50
    assert http.idle_for < 50
    assert list(registry.idle_lru()) == [ws]


def test_tick_notes_traffic_of_active_sessions_only() -> None:
    """No clock per chunk: the tick turns "chunks moved since the last tick" into a time."""
    registry = SessionRegistry(max_sessions=10)
    http = registry.open("http")
    quiet = registry.open("http")
    ws_idle = registry.open("websocket")
    ws_streaming = registry.open("websocket")
    stream = open_stream(ws_streaming)
    for session in (http, quiet, ws_idle, ws_streaming):
        session.last_activity = 0.0
    http.chunks_out += 3
    ws_streaming.chunks_out += 1
    ws_idle.chunks_in += 1  # idle sessions are not walked: touch() records their activity
    registry.note_activity(now=50.0)
    assert (http.last_activity, ws_streaming.last_activity) == (50.0, 50.0)
    assert (quiet.last_activity, ws_idle.last_activity) == (0.0, 0.0)
    registry.note_activity(now=60.0)  # nothing moved since: the time of the first tick stays
    assert (http.last_activity, ws_streaming.last_activity) == (50.0, 50.0)
    http.chunks_in += 1
    registry.note_activity(now=70.0)
    assert http.last_activity == 70.0
    assert close(registry, http, CloseReason.COMPLETED)
    http.chunks_out += 1
    registry.note_activity(now=80.0)  # closing: no longer walked
    assert http.last_activity == 70.0
    del stream


def test_idle_lru_returns_snapshot() -> None:
    registry = SessionRegistry(max_sessions=10)
    a, b = registry.open("websocket"), registry.open("websocket")
    it = registry.idle_lru()
    close(registry, a, CloseReason.EVICTED)  # mutating while iterating must not raise
    assert list(it) == [a, b]
    assert list(registry.idle_lru()) == [b]


def test_expired_idle_returns_only_stale_sessions_in_lru_order() -> None:
    registry = SessionRegistry(max_sessions=10)
    a, b, c, d = (registry.open("websocket") for _ in range(4))
    now = time.monotonic()
    for session in (c, a, b):  # opened a, b, c, d; after these touches the LRU is d, c, a, b
        registry.touch(session)
    c.last_activity = now - 300
    a.last_activity = now - 200
    b.last_activity = now - 100
    d.last_activity = now - 500
    assert list(registry.idle_lru()) == [d, c, a, b]
    assert registry.expired_idle(150) == [d, c, a]
    assert registry.expired_idle(400) == [d]
    assert registry.expired_idle(1000) == []
    assert registry.expired_idle(50) == [d, c, a, b]


def test_expired_idle_excludes_fresh_and_active_sessions() -> None:
    registry = SessionRegistry(max_sessions=10)
    stale = registry.open("websocket")
    fresh = registry.open("websocket")
    http = registry.open("http")
    stale.last_activity -= 1000
    http.last_activity -= 1000  # active sessions are never "idle expired"
    assert registry.expired_idle(10) == [stale]
    assert fresh not in registry.expired_idle(10)


# -- size buckets --------------------------------------------------------------------------


def test_largest_streams_biggest_bucket_first() -> None:
    registry = SessionRegistry(max_sessions=10)
    small, big, medium, huge = (registry.open("http") for _ in range(4))
    streams = {session.id: open_stream(session) for session in (small, big, medium, huge)}
    streams[small.id].declare_held(10)
    medium.attached_bytes = 5_000
    big.buffered_bytes = 400_000
    huge.attached_bytes = 50_000_000
    streams[huge.id].set_backend_bytes(1)
    for session in (small, big, medium, huge):
        registry.resize(session)
    assert list(registry.largest_streams()) == [huge, big, medium, small]


def test_buckets_follow_held_bytes_not_traffic() -> None:
    registry = SessionRegistry(max_sessions=10)
    chatty, holder = registry.open("http"), registry.open("http")
    open_stream(chatty)
    held = open_stream(holder)
    chatty.bytes_out = 7 * 2**20  # sent 7 MiB, holds nothing
    held.declare_held(200 * 2**20)  # re-buckets by itself: its power of two changed
    assert holder.held_bytes == 200 * 2**20 and chatty.held_bytes == 0
    assert list(registry.largest_streams()) == [holder, chatty]


def test_largest_streams_orders_within_a_bucket() -> None:
    registry = SessionRegistry(max_sessions=10)
    a, b, c = (registry.open("http") for _ in range(3))
    for session, size in ((a, 1030), (b, 2000), (c, 1500)):  # all bit_length 11
        open_stream(session).set_backend_bytes(size)
    assert list(registry.largest_streams()) == [b, c, a]


def test_resize_moves_sessions_between_buckets() -> None:
    registry = SessionRegistry(max_sessions=10)
    a, b = registry.open("http"), registry.open("http")
    open_stream(a)
    open_stream(b)
    a.buffered_bytes = 1_000_000
    b.buffered_bytes = 10
    registry.resize(a)
    registry.resize(b)
    assert list(registry.largest_streams()) == [a, b]
    a.buffered_bytes = 1
    b.buffered_bytes = 10_000_000
    a.held_changed()
    b.held_changed()
    assert list(registry.largest_streams()) == [b, a]


def test_sessions_without_streams_are_not_in_buckets() -> None:
    registry = SessionRegistry(max_sessions=10)
    http = registry.open("http")
    http.attached_bytes = 10**9
    registry.resize(http)
    assert list(registry.largest_streams()) == []


def test_closing_session_leaves_buckets() -> None:
    registry = SessionRegistry(max_sessions=10)
    a, b = registry.open("http"), registry.open("http")
    open_stream(a)
    open_stream(b)
    a.attached_bytes = 10**6
    registry.resize(a)
    assert registry.start_closing(a, CloseReason.EVICTED)
    assert list(registry.largest_streams()) == [b]
    registry.resize(a)  # a closing session is never re-bucketed
    assert list(registry.largest_streams()) == [b]


# -- capacity ------------------------------------------------------------------------------


def test_full_at_max_sessions() -> None:
    registry = SessionRegistry(max_sessions=2)
    assert not registry.full
    a = registry.open("http")
    assert not registry.full
    registry.open("websocket")
    assert registry.full
    close(registry, a, CloseReason.COMPLETED)
    assert not registry.full


# -- close ---------------------------------------------------------------------------------


def test_start_closing_only_once() -> None:
    registry = SessionRegistry(max_sessions=10)
    session = registry.open("websocket")
    assert registry.start_closing(session, CloseReason.EVICTED) is True
    assert session.state is SessionState.CLOSING
    assert session.closed
    assert registry.idle_count == 0
    assert registry.start_closing(session, CloseReason.ERROR) is False
    assert session.close_reason is CloseReason.EVICTED  # first reason wins
    assert registry.counters.evicted_total == 1
    registry.forget(session)
    assert registry.start_closing(session, CloseReason.EVICTED) is False
    assert registry.counters.evicted_total == 1


def test_forget_closes_once_and_leaves_attachments_to_the_guard() -> None:
    registry = SessionRegistry(max_sessions=10)
    session = registry.open("http")
    history = session.attach(["hello"])
    calls: list[Session] = []
    session.on_close(calls.append)
    registry.start_closing(session, CloseReason.COMPLETED)
    registry.forget(session)
    assert session.state is SessionState.CLOSED
    assert registry.sessions_with_attachments() == []
    assert session.attachments == (history,)  # dropping them is a step of Guard.close_session
    assert calls == []  # so is running the session's callbacks
    registry.forget(session)
    assert registry.counters.closed_total == 1


def test_evicted_by_reason() -> None:
    registry = SessionRegistry(max_sessions=10)
    for reason in (CloseReason.EVICTED, CloseReason.IDLE_TIMEOUT, CloseReason.EVICTED,
                   CloseReason.COMPLETED):
        close(registry, registry.open("websocket"), reason)
    assert registry.counters.evicted_by_reason == {"evicted": 2, "idle_timeout": 1}


def test_evicted_total_counts_evicted_and_idle_timeout_only() -> None:
    registry = SessionRegistry(max_sessions=100)
    for reason in CloseReason:
        close(registry, registry.open("websocket"), reason)
    assert registry.counters.evicted_total == 2
    assert registry.counters.closed_total == len(CloseReason)
    summary = registry.summary()
    assert summary["evicted_total"] == 2
    assert summary["inbound_overflow_total"] == 1
    assert summary["send_timeout_total"] == summary["ping_timeout_total"] == 1
    assert summary["closed_total"] == len(CloseReason)
    assert summary["opened_total"] == len(CloseReason)
    assert summary["active"] == summary["idle"] == 0


def test_summary_counts_active_and_idle() -> None:
    registry = SessionRegistry(max_sessions=10)
    registry.open("websocket")
    registry.open("websocket")
    registry.open("http")
    registry.counters.shed_total = 3
    assert registry.summary() == {
        "active": 1,
        "idle": 2,
        "opened_total": 3,
        "closed_total": 0,
        "evicted_total": 0,
        "shed_total": 3,
        "inbound_overflow_total": 0,
        "send_timeout_total": 0,
        "ping_timeout_total": 0,
    }
