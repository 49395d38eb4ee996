"""The runtime leak sweeper, driven directly through a Guard's close hooks and ticks."""

from __future__ import annotations

import gc
import json
import logging
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from llm_guard_sdk import CloseReason, Guard, GuardConfig, Session, guard_stream
from llm_guard_sdk.leaks import (
    LeakSettings,
    LeakSweeper,
    Limits,
    deps,
    enable_leak_sweeper,
    find_chain,
)
from llm_guard_sdk.leaks.runtime.graph import redact_dot
from llm_guard_sdk.leaks.runtime.tracking import SessionWatch

pytestmark = pytest.mark.anyio

SECRET = "my secret prompt"


class Context:
    def __init__(self, prompt: str = SECRET) -> None:
        self.prompt = prompt
        self.history = [prompt * 1000]


class Slotted:
    __slots__ = ("value",)  # no __weakref__: cannot be weakly referenced

    def __init__(self) -> None:
        self.value = Context()


CACHE: dict[str, Any] = {}
CALLBACKS: list[Any] = []


@pytest.fixture(autouse=True)
def _clear_globals() -> Any:
    yield
    CACHE.clear()
    CALLBACKS.clear()


def make(**overrides: Any) -> tuple[Guard, LeakSweeper]:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    settings = LeakSettings.defaults(leak_grace=0, **overrides)
    return guard, enable_leak_sweeper(guard, collect_interval=0, graphs=0, settings=settings)


async def close(guard: Guard, session: Session) -> None:
    await guard.close_session(session, CloseReason.COMPLETED)


async def serve(guard: Guard, handler: Any = None) -> str:
    """One session: ``handler(session)`` does the app's work; closed before returning."""
    session = guard.registry.open("http", "/")
    if handler is not None:
        result = handler(session)
        if hasattr(result, "__await__"):
            await result
    await close(guard, session)
    return session.id


def cache_context(session: Session) -> None:
    CACHE[session.id] = session.attach(Context())


def later() -> float:
    return time.monotonic() + 3600  # a sweep "after the grace period"


async def test_env_switch_attaches_sweeper_and_routes() -> None:
    guard = Guard(GuardConfig.from_env({"LLM_GUARD_LEAKS": "1", "LLM_GUARD_SOURCES": "process"}))
    assert isinstance(guard.extensions["leaks"], LeakSweeper)
    assert {"/leaks", "/snapshot"} <= set(guard.control_routes)
    assert enable_leak_sweeper(guard) is guard.extensions["leaks"]  # idempotent
    assert "leaks" not in Guard(GuardConfig.defaults(sources=("process",))).extensions


async def test_clean_sessions_leave_nothing() -> None:
    guard, sweeper = make()

    async def work(session: Session) -> None:
        session.attach(Context())
        session.attach({"history": [SECRET]})
        session.attach([SECRET])

        async def tokens() -> Any:
            yield "a"

        async for _ in guard_stream(tokens(), session=session):
            pass

    for _ in range(5):
        await serve(guard, work)
    assert sweeper.sweep(later()) == []
    status = guard.status()["leaks"]
    assert status["suspected_total"] == 0
    assert status["confirmed_total"] == 0
    assert status["sessions_tracked_total"] == 5
    assert status["recent"] == []


async def test_survivor_is_flagged_only_after_grace() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    sweeper = enable_leak_sweeper(guard, settings=LeakSettings.defaults(leak_grace=60))
    await serve(guard, cache_context)
    assert sweeper.sweep() == []  # within grace
    assert sweeper.tracked == 1
    reports = sweeper.sweep(time.monotonic() + 61)
    assert [r["kind"] for r in reports] == ["attachment"]
    assert sweeper.tracked == 0


async def test_report_has_chain_size_and_no_content(caplog: pytest.LogCaptureFixture) -> None:
    guard, sweeper = make()
    session_id = await serve(guard, cache_context)
    with caplog.at_level(logging.WARNING, logger="llm_guard_sdk.leaks"):
        (report,) = sweeper.sweep(later())
    assert report["owner"] == session_id
    assert report["type"] == f"{__name__}.Context"
    assert report["chain"]["text"] == (
        f"module {__name__} -> dict CACHE -> dict['sess-…'] -> Context")
    assert report["size_bytes"] > len(SECRET) * 1000
    assert SECRET not in json.dumps(report)
    assert "repr" not in report
    assert "dict CACHE" in caplog.text and SECRET not in caplog.text
    status = guard.status()["leaks"]
    assert status["suspected_total"] == status["confirmed_total"] == 1
    assert status["recent"][0]["chain"].endswith("-> Context")
    assert guard.control_routes["/leaks"]({}) == (200, sweeper.report())


async def test_log_content_includes_repr() -> None:
    guard, sweeper = make(log_content=True)
    session_id = await serve(guard, cache_context)
    (report,) = sweeper.sweep(later())
    assert "Context object" in report["repr"]
    assert f"dict['{session_id}']" in report["chain"]["text"]  # keys shown in full too


async def test_closure_and_stream_source_and_session() -> None:
    guard, sweeper = make()

    async def tokens() -> Any:
        yield "a"
        yield "b"

    async def handler(session: Session) -> None:
        ctx = session.attach(Context())

        def on_done() -> str:
            return ctx.prompt

        CALLBACKS.append(on_done)
        source = tokens()
        await guard_stream(source, session=session, name="chat").__anext__()
        CACHE["conn-1"] = source
        CACHE["session"] = session

    await serve(guard, handler)
    reports = {r["kind"]: r for r in sweeper.sweep(later())}
    assert set(reports) == {"attachment", "generator", "session"}
    assert reports["attachment"]["chain"]["text"].endswith(
        "-> list CALLBACKS -> function test_closure_and_stream_source_and_session.<locals>."
        "handler.<locals>.on_done -> closure ctx -> Context")
    assert reports["generator"]["label"] == "chat"
    assert reports["generator"]["chain"]["text"].endswith(
        "dict['conn-…'] -> async_generator test_closure_and_stream_source_and_session."
        "<locals>.tokens")
    assert reports["session"]["chain"]["text"].endswith("dict[<str len=7>] -> Session")


async def test_unweakrefable_attachments_tracked_by_refcount_or_untrackable() -> None:
    guard, sweeper = make()
    keep = [Slotted()]

    def handler(session: Session) -> None:
        CACHE["h"] = session.attach([SECRET])  # a second owner: tracked, held for one check
        session.attach({"only": "the session holds me"})  # dies with the session: untracked
        session.attach(Slotted())  # no weak references, no other owner: untracked
        session.attach(keep[0])  # held by this test until after the close: held for a check

    await serve(guard, handler)
    assert guard.status()["leaks"]["held_for_check"] == 2
    keep.clear()  # gone before the grace ends: released quietly
    reports = sweeper.sweep(later())
    assert [r["type"] for r in reports] == ["list"]
    assert reports[0]["chain"]["text"].endswith("dict CACHE -> dict[<str len=1>] -> list")
    assert guard.status()["leaks"]["held_for_check"] == 0

    sweeper.watch.max_held = 0
    await serve(guard, lambda session: CACHE.update(h2=session.attach([SECRET])))
    assert guard.status()["leaks"]["untrackable_total"] == 1
    assert sweeper.sweep(later()) == []


async def test_revived_by_del_is_reported() -> None:
    guard, sweeper = make()
    parked: list[Any] = []

    class Connection:
        def __init__(self, ctx: Context) -> None:
            self.ctx = ctx
            self.me = self

        def __del__(self) -> None:
            parked.append(self)

    await serve(guard, lambda session: Connection(session.attach(Context())))
    sweeper.revival_interval = 0
    reports = sweeper.sweep(later())
    assert [r["kind"] for r in reports] == ["revived"]
    assert "revived by a __del__" in reports[0]["note"]
    assert reports[0]["chain"]["text"].endswith(
        "-> list -> test_revived_by_del_is_reported.<locals>.Connection -> Context ctx")
    parked.clear()


async def test_tick_runs_the_sweep_in_the_background() -> None:
    guard, sweeper = make()
    await serve(guard, cache_context)
    await guard.tick()
    assert sweeper.worker is not None
    await sweeper.worker
    assert guard.status()["leaks"]["confirmed_total"] == 1


async def test_forensics_budget_and_distinct_types_first() -> None:
    guard, sweeper = make()
    sweeper.max_forensics = 2
    for _ in range(3):
        await serve(guard, cache_context)
    await serve(guard, lambda session: CACHE.update(s=session))
    reports = sweeper.sweep(later())
    assert len(reports) == 4
    statuses = [(r["kind"], r["chain"]["status"]) for r in reports]
    assert statuses[:2] == [("attachment", "found"), ("session", "found")]
    assert [s for _, s in statuses[2:]] == ["skipped", "skipped"]


async def test_degraded_mode_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deps, "load_objgraph", lambda: None)
    monkeypatch.setattr(deps, "load_asizeof", lambda: None)
    guard, sweeper = make()
    await serve(guard, cache_context)
    (report,) = sweeper.sweep(later())
    assert report["chain"]["text"].endswith("dict CACHE -> dict['sess-…'] -> Context")
    assert report["size_bytes"] is None
    assert report["graph"] is None
    assert guard.status()["leaks"]["mode"].startswith("degraded: no graphs (objgraph missing)")


def test_chain_search_is_bounded() -> None:
    holder = {"a": {"b": {"c": Context()}}}
    target = holder["a"]["b"]["c"]
    assert find_chain(target, max_depth=1).status == "no_root"
    gave_up = find_chain(target, timeout=0)
    assert gave_up.status == "gave_up"
    assert gave_up.text.startswith("gave up after 0 s")
    assert find_chain(target).status in ("found", "no_root")  # held by this frame's locals


def test_watch_survives_odd_objects() -> None:
    watch = SessionWatch()
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("http", "/")
    for value in (1, "text", b"bytes x", (1, 2), None, frozenset()):
        session.attach(value)
    session.attach(Slotted())
    del value
    records = watch.on_close(session)
    assert [r.kind for r in records] == ["session"]  # immutable values are never held
    assert watch.untrackable_total > 0  # constants have other owners (the code object)


def test_graph_labels_are_redacted() -> None:
    secret_key = "what is my password?"
    cache = {secret_key: Context()}
    module_ns = {"CACHE": cache}
    known = {f"o{id(cache)}": cache, f"o{id(cache[secret_key])}": cache[secret_key],
             f"o{id(module_ns)}": module_ns}
    dot = (f'  o{id(cache)}[label="dict\\n{secret_key}"];\n'
           f'  o{id(cache)} -> o{id(cache[secret_key])} [label="{secret_key}",weight=2];\n')
    redacted = redact_dot(dot, known)
    assert secret_key not in redacted
    assert "<str len=20>" in redacted and "1 items" in redacted


async def test_png_is_drawn_when_dot_exists(tmp_path: Any) -> None:
    if deps.dot_path() is None:
        pytest.skip("graphviz 'dot' is not installed")
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    sweeper = enable_leak_sweeper(guard, report_dir=tmp_path, graphs=1, grace=0)
    for _ in range(2):
        await serve(guard, cache_context)
    reports = sweeper.sweep(later())
    graphs = [r["graph"] for r in reports if r["graph"]]
    assert len(graphs) == 1  # the budget
    assert header(graphs[0]) == b"\x89PNG"


def header(path: str) -> bytes:
    return Path(path).read_bytes()[:4]


async def test_limits_apply() -> None:
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    sweeper = enable_leak_sweeper(guard, limits=Limits(chain_depth=1), grace=0)
    await serve(guard, cache_context)
    gc.collect()
    (report,) = sweeper.sweep(later())
    assert report["chain"]["status"] == "no_root"


class Hostile:
    """An app object that fights introspection."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no attribute {name} for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparisons")

    __hash__ = object.__hash__


async def test_hostile_objects_never_crash_the_sweep() -> None:
    guard, sweeper = make(log_content=True)

    def handler(session: Session) -> None:
        hostile = session.attach(Hostile())
        CACHE[session.id] = hostile
        CACHE["proxy"] = session.attach(weakref.proxy(hostile))  # cannot be weakly referenced

    session_id = await serve(guard, handler)
    hostile, proxy = sweeper.sweep(later())
    assert hostile["type"] == f"{__name__}.Hostile"
    assert hostile["chain"]["text"].endswith(f"dict['{session_id}'] -> Hostile")
    assert hostile["repr"] == "<repr failed: RuntimeError>"
    assert proxy["chain"]["text"].endswith("dict['proxy'] -> ProxyType")  # held: others own it
    assert guard.internal_errors_total == 0


class LazyProxy:
    """Like Django's SimpleLazyObject: asking for ``__class__`` evaluates it."""

    evaluated = 0

    def __init__(self, target: object) -> None:
        self.target = target

    @property
    def __class__(self) -> type:
        LazyProxy.evaluated += 1
        return dict


async def test_lazy_proxies_are_never_evaluated() -> None:
    from llm_guard_sdk.leaks.testing import growth

    guard, sweeper = make()

    def handler(session: Session) -> None:
        CACHE["lazy"] = LazyProxy(session.attach(Context()))
        session.attach(LazyProxy(None))

    await serve(guard, handler)
    (report,) = sweeper.sweep(later())
    assert report["chain"]["text"].endswith("dict[<str len=4>] -> LazyProxy -> Context target")
    growth.instances((dict, "LazyProxy"))
    assert LazyProxy.evaluated == 0
