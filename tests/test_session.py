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
        self.calls.append(("resize", session.accounted_bytes))
        session.bucket = session.accounted_bytes.bit_length()

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
    session.stream_bytes = 50
    session.remove_stream(a, CloseReason.COMPLETED)
    assert session.streams == (b,)
    assert session.stream_bytes == 20  # a's bytes are released
    session.remove_stream(a, CloseReason.ERROR)  # a second removal only reports it
    assert table.calls == [("opened", "a"), ("opened", "b"), ("closed", "a", CloseReason.COMPLETED),
                           ("closed", "a", CloseReason.ERROR)]


def test_stream_bytes_rebucket_only_when_the_power_of_two_changes() -> None:
    table = TableLog()
    session = Session("http", table=table)
    session.add_stream_bytes(5)  # 0 -> 5: bit length 0 -> 3
    session.add_stream_bytes(2)  # 7: still 3 bits
    session.add_stream_bytes(1)  # 8: 4 bits
    assert session.stream_bytes == 8
    assert table.calls == [("resize", 5), ("resize", 8)]


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
    assert set(summary) >= {"id", "state", "bytes_in", "bytes_out", "streams", "accounted_bytes"}


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
