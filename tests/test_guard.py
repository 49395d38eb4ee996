"""The guard as coordinator: tick table, admission, sampler, close sequence, extensions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.guard import Guard
from llm_guard_sdk.monitors.base import Reading
from llm_guard_sdk.policy import Level
from llm_guard_sdk.session import CloseReason, Session
from llm_guard_sdk.stream import guard_stream
from tests.support.guard import (
    EVICT,
    NORMAL,
    SHED,
    WARN,
    fake_source,
    idle,
    make_guard,
    until,
)

pytestmark = pytest.mark.anyio


async def test_max_evictions_per_tick_caps_a_tick() -> None:
    fake = fake_source(EVICT)
    guard = make_guard(fake, max_evictions_per_tick=2)
    sessions = [idle(guard, 1) for _ in range(5)]
    await guard.tick()
    assert [s.closed for s in sessions] == [True, True, False, False, False]
    assert guard.registry.counters.evicted_total == 2
    assert await guard.evict() == 2
    assert [s.closed for s in sessions] == [True, True, True, True, False]


async def test_tick_at_evict_level_evicts_but_not_at_warn() -> None:
    fake = fake_source(WARN)
    guard = make_guard(fake)
    s = idle(guard, 1_000_000)
    await guard.tick()
    assert guard.policy.level is Level.WARN
    assert not s.closed
    fake.used = EVICT
    await guard.tick()
    assert guard.policy.level is Level.EVICT
    assert s.closed
    assert s.close_reason is CloseReason.EVICTED


async def test_sampler_start_and_stop() -> None:
    fake = fake_source(NORMAL)
    guard = make_guard(fake, sample_interval=0.01)
    reads = fake.reads
    guard.ensure_started()
    guard.ensure_started()  # idempotent on the same loop
    await until(lambda: fake.reads > reads)
    await guard.stop()
    after = fake.reads
    await asyncio.sleep(0.03)
    assert fake.reads == after


async def test_source_oserror_is_tolerated() -> None:
    class Broken:
        name = "broken"

        def read(self) -> Reading:
            raise OSError("gone")

    fake = fake_source(EVICT)
    guard = make_guard(fake)
    guard.add_source(Broken())
    assert guard.sample_now() == pytest.approx(0.9)
    assert set(guard.readings) == {"fake"}


# -- admission -------------------------------------------------------------------------


async def test_admit() -> None:
    fake = fake_source(NORMAL)
    guard = make_guard(fake, max_sessions=2)
    assert guard.admit() is None
    fake.used = EVICT
    guard.sample_now()
    assert guard.admit() is None  # evict level still admits
    fake.used = SHED
    guard.sample_now()
    assert guard.policy.level is Level.SHED
    assert guard.admit() == "memory_pressure"

    fake.used = NORMAL
    guard.sample_now()
    assert guard.admit() is None
    a = guard.registry.open("http")
    assert guard.admit() is None
    guard.registry.open("http")
    assert guard.admit() == "max_sessions"
    fake.used = SHED
    guard.sample_now()
    assert guard.admit() == "memory_pressure"  # pressure is reported first
    fake.used = NORMAL
    guard.sample_now()
    await guard.close_session(a, CloseReason.COMPLETED)
    assert guard.admit() is None


async def test_shed_level_holds_with_hysteresis_for_admit() -> None:
    fake = fake_source(SHED)
    guard = make_guard(fake)
    assert guard.admit() == "memory_pressure"
    fake.used = 890_000  # below shed (0.92) but above shed - hysteresis (0.87)
    guard.sample_now()
    assert guard.admit() == "memory_pressure"
    fake.used = 860_000
    guard.sample_now()
    assert guard.admit() is None


async def test_admission_checks_and_record_shed() -> None:
    guard = make_guard(fake_source(NORMAL))
    verdict: list[str | None] = [None]
    guard.add_admission_check(lambda: verdict[0])
    assert guard.admit() is None
    verdict[0] = "queue_full"
    assert guard.admit() == "queue_full"
    guard.record_shed("queue_full")
    guard.record_shed("memory_pressure")
    guard.record_shed("queue_full")
    assert guard.registry.counters.shed_total == 3
    assert guard.admission.shed_by_reason == {"queue_full": 2, "memory_pressure": 1}
    assert guard.status()["sessions"]["shed_total"] == 3


# -- status ----------------------------------------------------------------------------


# -- snapshots and heap trim -----------------------------------------------------------


# -- sources -------------------------------------------------------------------------------


async def test_sources_given_to_the_constructor_replace_the_configured_ones() -> None:
    fake = fake_source(WARN)
    guard = make_guard(fake)
    assert guard.sources == [fake]
    assert fake.reads == 1  # sampled once on construction
    assert guard.policy.level is Level.WARN
    assert guard.limit_bytes is not None  # still judged against the real limit
    assert guard.process.read().name == "process"  # heap trims still measure RSS


async def test_advisory_source_is_reported_but_never_sheds_or_evicts() -> None:
    guard = make_guard(fake_source(NORMAL))
    guard.add_source(fake_source(SHED, name="kv"), evicts=False)
    s = idle(guard, 1_000_000)
    await guard.tick()
    assert guard.policy.level is Level.NORMAL  # the level follows evicting sources only
    assert guard.admit() is None  # unrelated work is never shed for an advisory pool
    assert not s.closed
    assert guard.sampler.pressure_of("kv") == pytest.approx(0.95)  # its owner reads it
    assert guard.sampler.pressure_of("missing") is None
    memory = guard.status()["memory"]
    assert memory["source"] != "kv" and memory["sources"]["kv"]["advisory"] is True
    assert memory["sources"]["fake"]["advisory"] is False


# -- close sequence ------------------------------------------------------------------------


class RecordingConnection:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.watched = 0

    async def close(self, reason: CloseReason) -> None:
        self.log.append(f"connection {reason.value}")

    def watch(self) -> None:
        self.watched += 1


async def test_close_sequence_runs_in_order_once() -> None:
    guard = make_guard()
    session = guard.registry.open("http")
    log: list[str] = []
    never = asyncio.Event()

    async def tokens() -> AsyncIterator[str]:
        try:
            yield "a"
            await never.wait()
        finally:
            log.append("stream closed")

    connection = RecordingConnection(log)
    session.bind_connection(connection)
    stream = guard_stream(tokens(), session=session)
    assert connection.watched == 1  # opening a stream starts disconnect watching
    assert await anext(stream) == "a"
    session.attach(["history"])
    guard.add_close_hook(lambda s: log.append(
        f"hook {s.state.value} attachments={len(s.attachments)}"))
    session.on_close(lambda s: log.append(
        f"callback {s.state.value} attachments={len(s.attachments)}"))

    await guard.close_session(session, CloseReason.EVICTED)
    await guard.close_session(session, CloseReason.ERROR)

    assert log == [
        "stream closed",
        "connection evicted",
        "hook closing attachments=1",
        "callback closed attachments=0",
    ]
    assert session.close_reason is CloseReason.EVICTED
    assert session.connection is None
    assert guard.registry.get(session.id) is None
    assert guard.heap.pending  # an eviction asks for a heap trim


async def test_failing_hooks_are_counted_and_the_rest_still_run() -> None:
    guard = make_guard()
    session = guard.registry.open("http")
    ran: list[str] = []

    def boom(_: Session) -> None:
        raise RuntimeError("hook bug")

    guard.add_close_hook(boom)
    guard.add_close_hook(lambda s: ran.append("hook"))
    session.on_close(boom)
    session.on_close(lambda s: ran.append("callback"))
    await guard.close_session(session, CloseReason.COMPLETED)
    assert ran == ["hook", "callback"]
    assert guard.internal_errors_total == 2
    assert session.closed and guard.registry.get(session.id) is None


# -- extensions ----------------------------------------------------------------------------


class Recorder:
    """An extension that registers a status section and remembers its guard."""

    def __init__(self, name: str = "recorder") -> None:
        self.name = name
        self.guards: list[Guard] = []

    def setup(self, guard: Guard) -> None:
        self.guards.append(guard)
        guard.add_status_section(self.name, lambda: {"guards": len(self.guards)})


class Built:
    """Importable as ``tests.test_guard:Built`` (extensions given as "module:Class")."""

    name = "built"

    def setup(self, guard: Guard) -> None:
        guard.add_control_route("/built", lambda query: (200, {"ok": True}))


async def test_extensions_are_set_up_once_and_kept_by_name() -> None:
    first, second = Recorder(), Recorder()
    guard = Guard(make_guard().config, sources=[fake_source()], extensions=[first])
    assert first.guards == [guard]
    assert guard.add_extension(second) is first  # same name: the first one stays
    assert second.guards == []
    assert guard.extension("recorder") is first
    assert guard.extension("missing") is None
    assert guard.extensions["recorder"] is first
    assert guard.status()["recorder"] == {"guards": 1}


async def test_extension_by_import_string_and_unknown_names() -> None:
    guard = make_guard()
    built = guard.add_extension("tests.test_guard:Built")
    assert isinstance(built, Built)
    assert "/built" in guard.control_routes
    assert guard.add_extension("built") is built  # by name once kept
    with pytest.raises(ConfigError, match="unknown extension 'nope'; built-in extensions are: "
                                          "breakers, dashboard, degrade, leaks, metrics, "
                                          "quota, timeouts"):
        guard.add_extension("nope")
    with pytest.raises(ConfigError, match="is not an extension"):
        guard.add_extension("tests.test_guard:FakeSource")


async def test_leaks_setting_enables_the_leaks_extension_by_name() -> None:
    assert Guard(make_guard().config, sources=[fake_source()]).extension("leaks") is None
    guard = make_guard(leaks=True)
    assert guard.extension("leaks") is not None
    assert "/leaks" in guard.control_routes
    assert "leaks" in guard.status()
