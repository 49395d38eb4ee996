"""StreamProgress (actions/progress.py): one visit per stream per tick, samples to listeners."""

from __future__ import annotations

from typing import Any

from llm_guard_sdk.actions.progress import StreamProgress
from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import Session, SessionStream
from tests.support.guard import FakeStream


class Recorder:
    def __init__(self) -> None:
        self.tracked: list[str] = []
        self.samples: list[tuple[Any, float, bool, float, int]] = []

    def track(self, session: Session, stream: SessionStream, now: float) -> str:
        self.tracked.append(stream.name)
        return f"state-{stream.name}"

    def record(self, state: Any, lead: float, first_token: bool, share: float,
               repeats: int) -> None:
        self.samples.append((state, round(lead, 9), first_token, round(share, 9), repeats))


def test_samples_reach_listeners_once_per_tick_and_ended_streams_are_forgotten() -> None:
    progress = StreamProgress()
    recorder = Recorder()
    progress.add_listener(recorder)
    progress.add_listener(recorder)  # once per listener
    session = SessionRegistry(10).open("http", "/chat")
    stream = FakeStream("a")
    stream.started_at = 100.0
    progress.begin_tick(100.5)
    progress.begin_tick(100.5)  # already open: no second generation
    progress.visit(session, stream, 100.5)
    progress.end_tick(100.5)
    stream.chunks = 3
    progress.begin_tick(101.0)
    progress.visit(session, stream, 101.0)
    progress.visit(session, stream, 101.0)  # the same tick: nothing more
    progress.end_tick(101.0)
    assert recorder.tracked == ["a"]
    # 3 chunks in the tick (0.5 s): two shares of 1/6 s, the first gets the rest since start.
    assert recorder.samples == [("state-a", round(1.0 - 2 / 6, 9), True, round(1 / 6, 9), 2)]
    assert progress.section()["samples"] == 3
    assert progress.tracked == 1
    progress.begin_tick(101.5)
    progress.end_tick(101.5)  # the stream was not visited: it ended
    assert progress.tracked == 0
