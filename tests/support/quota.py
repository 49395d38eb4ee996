"""Helpers for the quota model's tests: known synthetic data, a fake clock, a recorder's guard."""

from __future__ import annotations

import math
import random
from typing import Any

from llm_guard_sdk import Guard
from llm_guard_sdk.quota import Observation, QuotaRecorder, QuotaSettings
from tests.support.sources import FakeSource, make_guard

#: The parameters :func:`synthetic` draws from: bytes per (req/s·token), per sqrt(token), base.
ALPHA, BETA, GAMMA = 50.0, 1.0e6, 1.0 * 2**30
#: The limit of the process source :func:`recorder_guard` builds.
LIMIT = 10_000


def synthetic(noise: float, seed: int = 7) -> list[Observation]:
    """A grid of rates x context lengths, memory from known parameters plus Gaussian noise.

    25 observations; every session lasts 12 s (two close per window).
    """
    rng = random.Random(seed)
    rows = []
    for rate in (1, 10, 50, 100, 200):
        for tokens in (256, 1024, 4096, 8192, 16384):
            qps = rate * rng.uniform(0.9, 1.1)  # measured rates are never round
            memory = ALPHA * qps * tokens + BETA * math.sqrt(tokens) + GAMMA
            rows.append(Observation(qps=qps, context_tokens=tokens,
                                    peak_process_bytes=int(memory + rng.gauss(0, noise)),
                                    peak_held_bytes=int(ALPHA * qps * tokens),
                                    sessions_closed=2, mean_session_seconds=12.0))
    return rows


class Clock:
    """Monotonic seconds the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def recorder_guard(**settings: Any) -> tuple[Guard, FakeSource, Clock, QuotaRecorder]:
    """A guard on a ``process`` FakeSource (limit :data:`LIMIT`) with a recorder on a Clock.

    ``settings`` are :class:`QuotaSettings` fields; the window defaults to 10 s.
    """
    source = FakeSource(used=100, limit=LIMIT, name="process")
    guard = make_guard(source)
    clock = Clock()
    recorder = QuotaRecorder(QuotaSettings(**{"window": 10.0, **settings}), clock=clock)
    assert guard.add_extension(recorder) is recorder
    return guard, source, clock, recorder
