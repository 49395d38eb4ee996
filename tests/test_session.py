"""Session's public interface, as streams, the registry, the ASGI edge and the guard use it."""

from __future__ import annotations

from typing import Any

import pytest

from llm_guard_sdk.session import CloseReason, Session, SessionState, SessionStream
from tests.support.guard import FakeConnection, FakeStream


class TableLog:
    """A SessionTable that records what the session tells it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def attached(self, session: Session) -> None:
        self.calls.append(("attached",))

    def resize(self, session: Session) -> None:
        self.calls.append(("resize", session.held_bytes))
        session.bucket = session.held_bytes.bit_length()

    def stream_opened(self, session: Session, stream: SessionStream) -> None:
        self.calls.append(("opened", stream.name))

    def stream_closed(self, session: Session, stream: SessionStream, reason: CloseReason) -> None:
        self.calls.append(("closed", stream.name, reason))


def test_streams_add_and_remove_through_the_table() -> None:
    table = TableLog()
    session = Session("http", table=table)
    connection = FakeConnection()
    session.bind_connection(connection)
    a, b = FakeStream("a", bytes_out=30), FakeStream("b")
    session.add_stream(a)
    session.add_stream(b)
    assert session.streams == (a, b)
    assert session.stream_count == 2
    assert connection.watched == 2  # every stream (re)starts watching; the pump is idempotent
    a.backend_bytes, b.declared_bytes = 30, 20
    assert session.held_bytes == 50
    assert session.remove_stream(a, CloseReason.COMPLETED)
    assert session.streams == (b,)
    assert session.held_bytes == 20  # what a held is released with it
    assert not session.remove_stream(a, CloseReason.ERROR)  # a second removal counts nothing
    assert table.calls == [("opened", "a"), ("opened", "b"), ("closed", "a", CloseReason.COMPLETED)]


def test_held_bytes_sum_attachments_buffers_and_every_stream() -> None:
    session = Session("websocket")
    a, b = FakeStream("a"), FakeStream("b")
    session.add_stream(a)
    session.add_stream(b)
    session.attached_bytes, session.buffered_bytes = 1000, 200
    a.backend_bytes, b.backend_bytes = 30, 40  # concurrent requests: summed, not overwritten
    a.declared_bytes = 5
    assert session.backend_bytes == 70 and session.declared_bytes == 5
    assert session.held_bytes == session.accounted_bytes == 1275
    session.bytes_in, session.bytes_out = 11, 7 * 2**20  # traffic never counts as held
    assert (session.bytes_received, session.bytes_sent) == (11, 7 * 2**20)
    assert session.held_bytes == 1275


def test_held_changed_rebuckets_only_when_the_power_of_two_changes() -> None:
    table = TableLog()
    session = Session("http", table=table)
    stream = FakeStream("a")
    session.add_stream(stream)
    for held in (5, 7, 8):  # bit length 3, 3, 4
        stream.declared_bytes = held
        session.held_changed()
    assert table.calls == [("opened", "a"), ("resize", 5), ("resize", 8)]


def test_stream_on_a_closed_session_is_counted_as_ended_at_once() -> None:
    table = TableLog()
    session = Session("http", table=table)
    session.mark_closing(CloseReason.EVICTED)
    stream = FakeStream("late")
    assert not session.add_stream(stream)
    assert session.streams == ()
    assert table.calls == [("opened", "late"), ("closed", "late", CloseReason.EVICTED)]
    assert not session.remove_stream(stream, CloseReason.COMPLETED)  # never counted twice


def test_first_attachment_tells_the_table() -> None:
    table = TableLog()
    session = Session("websocket", table=table)
    history = session.attach([])
    session.attach({})
    assert table.calls == [("attached",)]
    assert session.attachments[0] is history


def test_close_marks_once_and_drains() -> None:
    session = Session("http")
    connection = FakeConnection()
    session.bind_connection(connection)
    session.attach(["x"])
    calls: list[Session] = []
    session.on_close(calls.append)
    assert session.mark_closing(CloseReason.EVICTED)
    assert session.state is SessionState.CLOSING and session.closed
    assert not session.mark_closing(CloseReason.ERROR)
    assert session.close_reason is CloseReason.EVICTED  # first reason wins
    assert session.mark_closed()
    assert not session.mark_closed()
    assert session.connection is None
    session.drop_attachments()
    assert session.attachments == ()
    callbacks = session.drain_close_callbacks()
    assert session.drain_close_callbacks() == []
    for callback in callbacks:
        callback(session)
    assert calls == [session]


@pytest.mark.parametrize("kind", ["http", "websocket"])
def test_summary_holds_no_content(kind: str) -> None:
    session = Session(kind, "/chat", label="req-1")
    session.attach(["secret prompt"])
    summary = session.summary()
    assert summary["kind"] == kind
    assert "secret prompt" not in repr(summary)
    assert set(summary) >= {"id", "state", "bytes_in", "bytes_out", "streams", "accounted_bytes",
                            "bytes_sent", "bytes_received", "held_bytes", "attached_bytes",
                            "buffered_bytes", "backend_bytes", "declared_bytes", "estimated"}


def test_on_close_after_close_runs_immediately() -> None:
    session = Session("http")
    session.mark_closing(CloseReason.COMPLETED)
    session.mark_closed()
    calls: list[Session] = []
    session.on_close(calls.append)
    assert calls == [session]


def test_detach() -> None:
    session = Session("http")
    a, b = session.attach([1]), session.attach([1])
    session.detach(a)
    assert session.attachments == (b,)
    session.detach(object())
    assert session.attachments == (b,)
