"""The plugin's switches, controls without false positives, and what it must not break."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

CLEAN_CONTROLS = '''
import asyncio
import functools
import logging
import re
import typing

import pytest
from llm_guard_sdk import CloseReason, Guard, GuardConfig, guard_stream

class Context:
    def __init__(self, prompt):
        self.prompt = prompt

@functools.lru_cache(maxsize=8)
def lookup(key):
    return Context(key)  # cached on first call, then reused

async def tokens(ctx):
    for word in ctx.prompt.split():
        yield word

def warm_caches():
    assert re.compile(r"sess-[A-Za-z0-9_-]{22}").match("sess-" + "a" * 22)
    assert logging.getLogger("myapp.requests").isEnabledFor(logging.CRITICAL)  # level cache
    lookup("first")
    typing.Optional[Context]
    typing.get_type_hints(Context.__init__)

WATCH = (re.Pattern, logging.Logger, "typing._UnionGenericAlias", Context)

@pytest.mark.llm_guard_leaks(types=WATCH, repeat=4)
def test_sync_caches():
    warm_caches()

@pytest.mark.llm_guard_leaks(types=WATCH, repeat=3)
@pytest.mark.asyncio
async def test_asyncio_session_round_trip():
    warm_caches()
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("http", "/chat")
    session.attach(Context("hello world"))
    session.attach({"history": ["hello world"]})
    async for _ in guard_stream(tokens(Context("a b c")), session=session):
        pass
    await guard.close_session(session, CloseReason.COMPLETED)

@pytest.mark.llm_guard_leaks(types=WATCH, repeat=3)
@pytest.mark.anyio
async def test_anyio_tasks_finish():
    warm_caches()
    done = []
    async def worker():
        await asyncio.sleep(0)
        done.append(1)
    await asyncio.get_running_loop().create_task(worker())
    assert done
'''


def test_disabled_without_option_marker_or_fixture(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
KEEP = []
class Context:
    pass
def test_leaks_silently():
    KEEP.append(Context())
''')
    inner.runpytest().assert_outcomes(passed=1)


def test_ini_switch_enables_it(inner: pytest.Pytester) -> None:
    from tests.leaks.conftest import INNER_INI

    inner.makeini(INNER_INI + "llm_guard_leaks = true\n")
    inner.makepyfile('''
KEEP = []
def test_tracks(leak_guard):
    KEEP.append(leak_guard.track(type("Context", (), {})()))
''')
    inner.runpytest().assert_outcomes(failed=1)


def test_clean_controls_pass(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_controls=CLEAN_CONTROLS)
    inner.runpytest("--llm-guard-leaks").assert_outcomes(passed=3)


def test_type_growth_over_repeats_fails_with_chain(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
import pytest
HISTORY = []

class Context:
    pass

@pytest.mark.llm_guard_leaks(types=(Context,), repeat=4)
def test_grows():
    HISTORY.append(Context())

@pytest.mark.llm_guard_leaks(types=("Context",), repeat=4, max_growth=3)
def test_within_allowance():
    HISTORY.append(Context())
''')
    result = inner.runpytest()
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        "*instance growth: test_type_growth_over_repeats_fails_with_chain.Context: +3 instances "
        "over 3 more runs of the test body (max_growth=0)*",
        "*held by: module test_type_growth_over_repeats_fails_with_chain -> list HISTORY -> "
        "Context",
    ])


def test_repeat_runs_the_body_for_sync_asyncio_and_anyio(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
import pytest
RUNS = {"sync": 0, "asyncio": 0, "anyio": 0}

@pytest.mark.llm_guard_leaks(repeat=3)
def test_sync():
    RUNS["sync"] += 1

@pytest.mark.llm_guard_leaks(repeat=3)
@pytest.mark.asyncio
async def test_asyncio():
    RUNS["asyncio"] += 1

@pytest.mark.llm_guard_leaks(repeat=3)
@pytest.mark.anyio
async def test_anyio():
    RUNS["anyio"] += 1

def test_counts():
    assert RUNS == {"sync": 3, "asyncio": 3, "anyio": 3}
''')
    inner.runpytest("-p", "no:randomly").assert_outcomes(passed=4)


def test_leak_guard_track_and_assert(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
import pytest
KEEP = {}

class Context:
    pass

def test_assert_no_leaks_fails_now(leak_guard):
    KEEP["ctx"] = leak_guard.track(Context(), "ctx")
    leak_guard.assert_no_leaks()

def test_dict_held_elsewhere_fails_at_end(leak_guard):
    KEEP["state"] = leak_guard.track({"history": []}, "state")

def test_freed_objects_pass(leak_guard):
    leak_guard.track(Context())
    leak_guard.track([1, 2, 3])
    leak_guard.assert_no_leaks()
''')
    result = inner.runpytest()
    result.assert_outcomes(failed=2, passed=1)
    out = result.stdout.str()
    assert "tracked object: test_leak_guard_track_and_assert.Context x1" in out
    assert "(ctx)" in out
    assert "tracked object: dict x1" in out
    assert "dict KEEP -> dict['state" not in out  # keys are redacted ...
    assert "-> dict KEEP -> dict[<str len=5>] -> dict" in out  # ... to their shape


def test_bad_marker_arguments_fail_the_test(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
import pytest

@pytest.mark.llm_guard_leaks(types=(int,), repeat=1)
def test_repeat_too_small():
    pass

@pytest.mark.llm_guard_leaks(typo=True)
def test_unknown_argument():
    pass
''')
    result = inner.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*repeat must be an integer >= 2 when types are given*",
                                 "*takes only keyword arguments*"])


def test_failing_or_skipped_tests_are_not_blamed_for_leaks(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
import pytest
KEEP = []

def test_fails(leak_guard):
    KEEP.append(leak_guard.track(type("C", (), {})()))
    assert False, "the real failure"

def test_skipped(leak_guard):
    KEEP.append(leak_guard.track(type("C", (), {})()))
    pytest.skip("not today")
''')
    result = inner.runpytest()
    result.assert_outcomes(failed=1, skipped=1)
    assert "llm-guard:" not in result.stdout.str()
    assert "the real failure" in result.stdout.str()


def test_degraded_mode_without_objgraph_and_pympler(inner: pytest.Pytester) -> None:
    inner.makeconftest('''
from llm_guard_sdk.leaks import deps

SAVED = {}

def pytest_configure(config):  # patched for the whole run: the check runs after teardown
    for name in ("load_objgraph", "load_asizeof"):
        SAVED[name] = getattr(deps, name)
        setattr(deps, name, lambda: None)

def pytest_unconfigure(config):
    for name, loader in SAVED.items():
        setattr(deps, name, loader)
''')
    inner.makepyfile('''
KEEP = []
class Context:
    pass
def test_leaks(leak_guard):
    KEEP.append(leak_guard.track(Context()))
''')
    result = inner.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*tracked object: test_degraded_mode_without_objgraph_and_pympler.Context x1*",
        "*held by: module test_degraded_mode_without_objgraph_and_pympler -> list KEEP "
        "-> Context",  # chains need no extra
        "*(forensics degraded: no graphs (objgraph missing); no sizes "
        "(pympler missing); install llm-guard-sdk[[]leaks])*",
    ])


def test_event_loop_asyncgen_hooks_are_chained_and_restored(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
import asyncio
import sys
import pytest

ORIGINAL = sys.set_asyncgen_hooks

async def gen():
    yield 1

@pytest.mark.llm_guard_leaks(asyncgens=False)
@pytest.mark.asyncio
async def test_loop_hooks_still_run():
    loop = asyncio.get_running_loop()
    hooks = sys.get_asyncgen_hooks()
    inner = hooks.firstiter.__llm_guard_inner__
    assert inner.__self__ is loop  # asyncio's own hook, behind ours
    assert hooks.finalizer.__llm_guard_inner__.__self__ is loop
    g = gen()
    await g.__anext__()
    assert g in loop._asyncgens  # asyncio's firstiter ran: shutdown_asyncgens will close it
    await g.aclose()

def test_restored_afterwards():
    assert sys.set_asyncgen_hooks is ORIGINAL
    assert sys.get_asyncgen_hooks() == (None, None)
''')
    inner.runpytest("-p", "no:randomly").assert_outcomes(passed=2)


def test_entry_point_is_registered() -> None:
    points = importlib.metadata.entry_points(group="pytest11")
    assert any(p.name == "llm_guard" and p.value == "llm_guard_sdk.pytest_plugin"
               for p in points)


def test_plugin_import_is_light() -> None:
    code = ("import sys, llm_guard_sdk.pytest_plugin\n"
            "heavy = ['objgraph', 'pympler', 'starlette', 'fastapi', 'uvicorn', 'httpx',\n"
            "         'llm_guard_sdk.leaks']\n"
            "print([m for m in heavy if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out.strip() == "[]"


def test_reports_reach_x_and_junitxml(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
KEEP = []
class Context:
    pass
def test_first(leak_guard):
    KEEP.append(leak_guard.track(Context()))
def test_second(leak_guard):
    KEEP.append(leak_guard.track(Context()))
''')
    result = inner.runpytest("-x", "--junitxml=out.xml")
    result.assert_outcomes(failed=1)  # -x saw the leak failure and stopped
    xml = (inner.path / "out.xml").read_text()
    assert 'failures="1"' in xml and "llm-guard: 1 leak" in xml


def test_module_scoped_event_loop(inner: pytest.Pytester) -> None:
    inner.makepyfile('''
import asyncio
import pytest
from llm_guard_sdk import CloseReason, Guard, GuardConfig

async def forever(session):
    await asyncio.sleep(3600)

@pytest.mark.asyncio(loop_scope="module")
async def test_task_holds_session():
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("http", "/")
    asyncio.get_running_loop().create_task(forever(session))
    await guard.close_session(session, CloseReason.COMPLETED)

@pytest.mark.asyncio(loop_scope="module")
async def test_clean_on_the_same_loop():
    guard = Guard(GuardConfig.defaults(sources=("process",)))
    session = guard.registry.open("http", "/")
    await guard.close_session(session, CloseReason.COMPLETED)
''')
    result = inner.runpytest("--llm-guard-leaks", "-p", "no:randomly")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*session: llm_guard_sdk.session.Session x1*",
                                 "*held by: Task * (pending) -> coroutine forever -> local "
                                 "session -> Session"])
