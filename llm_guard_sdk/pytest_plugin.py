"""pytest plugin ``llm_guard``: fail the test that leaks a session, a stream or its context.

Registered through the ``pytest11`` entry point and inert unless asked: ``--llm-guard-leaks``
(or ``llm_guard_leaks = true`` in the ini file) checks every test, the marker
``@pytest.mark.llm_guard_leaks(types=(...), repeat=N, max_growth=0, asyncgens=True)`` checks
one, and the ``leak_guard`` fixture (``track(obj)``, ``assert_no_leaks()``) checks the test that
uses it. Importing it loads nothing beyond pytest and the core SDK modules: the checker,
objgraph and pympler are imported only for a test that is checked.

A checked test runs setup, call and teardown as pytest's own protocol does, then the check
(after fixtures are torn down and pytest dropped its fixture values, followed by a
``gc.collect()``), and only then are the reports logged, so a leak turns the call report into a
failure instead of adding a teardown error.
"""

from __future__ import annotations

import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import pytest

if TYPE_CHECKING:
    from llm_guard_sdk.leaks.testing.checker import Settings, TestLeakCheck

T = TypeVar("T")
MARKER = "llm_guard_leaks"
_CHECK = pytest.StashKey["TestLeakCheck"]()
_ERROR = pytest.StashKey[str]()
_KWARGS = frozenset({"types", "repeat", "max_growth", "asyncgens"})


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--llm-guard-leaks``, ``--llm-guard-leaks-graphs`` and the ini switch."""
    group = parser.getgroup("llm-guard", "llm-guard-sdk leak detection")
    group.addoption("--llm-guard-leaks", action="store_true", default=False,
                    help="fail every test that leaks guard sessions, streams, their context "
                         "or async generators (see the llm_guard_leaks marker)")
    group.addoption("--llm-guard-leaks-graphs", metavar="DIR", default=None,
                    help="directory for PNG back-reference graphs of leaks (needs graphviz "
                         "'dot'); default: <basetemp>/llm-guard-leaks")
    parser.addini("llm_guard_leaks", type="bool", default=False,
                  help="check every test for leaks, as --llm-guard-leaks does")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker so ``--strict-markers`` accepts it."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(types=(), repeat=1, max_growth=0, asyncgens=True): fail this test when "
        "objects it closed or tracked survive teardown, when instances of `types` grow over "
        "`repeat` runs of its body, or when it leaves async generators unclosed.")


def _wanted(item: pytest.Item) -> pytest.Mark | bool:
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        return marker
    if "leak_guard" in getattr(item, "fixturenames", ()):
        return True
    config = item.config
    return bool(config.getoption("llm_guard_leaks") or config.getini("llm_guard_leaks"))


def _settings(item: pytest.Item, marker: pytest.Mark | bool) -> tuple[Settings, str]:
    from llm_guard_sdk.leaks.testing.checker import Settings

    settings = Settings(graph_dir=_graph_dir(item.config))
    if not isinstance(marker, pytest.Mark):
        return settings, ""
    kwargs = dict(marker.kwargs)
    if marker.args or set(kwargs) - _KWARGS:
        return settings, f"{MARKER} takes only keyword arguments {sorted(_KWARGS)}"
    types = kwargs.get("types", ())
    types = tuple(types) if isinstance(types, list | tuple) else (types,)
    repeat, max_growth = kwargs.get("repeat", 3 if types else 1), kwargs.get("max_growth", 0)
    if not all(isinstance(t, type | str) for t in types):
        return settings, f"{MARKER}: types must be classes or type names"
    if not isinstance(repeat, int) or repeat < (2 if types else 1):
        return settings, (f"{MARKER}: repeat must be an integer >= 2 when types are given "
                          "(the first run warms caches) and >= 1 otherwise")
    if not isinstance(max_growth, int) or max_growth < 0:
        return settings, f"{MARKER}: max_growth must be an integer >= 0"
    settings.types, settings.repeat, settings.max_growth = types, repeat, max_growth
    settings.asyncgens = bool(kwargs.get("asyncgens", True))
    return settings, ""


def _graph_dir(config: pytest.Config) -> Path | None:
    from llm_guard_sdk.leaks.deps import dot_path

    option = config.getoption("llm_guard_leaks_graphs")
    if option:
        return Path(option)
    if dot_path() is None:
        return None
    factory = getattr(config, "_tmp_path_factory", None)
    base = factory.getbasetemp() if factory is not None else Path(tempfile.gettempdir())
    return Path(base) / "llm-guard-leaks"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run a checked test's phases, check for leaks, then log its reports."""
    wanted = _wanted(item)
    if wanted is False:
        return None
    from _pytest.runner import runtestprotocol

    from llm_guard_sdk.leaks.testing.checker import TestLeakCheck

    settings, error = _settings(item, wanted)
    check = TestLeakCheck(item.nodeid, settings)
    item.stash[_CHECK] = check
    if error:
        item.stash[_ERROR] = error
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    check.start()
    try:
        reports = runtestprotocol(item, log=False, nextitem=nextitem)
        failure = _verdict(check, reports)
    finally:
        check.stop()
        del item.stash[_CHECK]
    if failure:
        _fail_call(item, reports, failure)
    for report in reports:
        ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _verdict(check: TestLeakCheck, reports: list[pytest.TestReport]) -> str | None:
    # A failed or skipped test leaves tracebacks holding frames: nothing to learn there.
    if not any(r.when == "call" for r in reports) or not all(r.passed for r in reports):
        return None
    try:
        return check.failure()
    except Exception as exc:  # a bug in the check must not pass silently nor crash pytest
        return f"llm-guard: the leak check itself failed: {type(exc).__name__}: {exc}"


def _fail_call(item: pytest.Item, reports: list[pytest.TestReport], message: str) -> None:
    for report in reports:
        if report.when == "call":
            try:
                pytest.fail(message, pytrace=False)
            except pytest.fail.Exception:
                excinfo = pytest.ExceptionInfo.from_current()
            report.outcome = "failed"
            report.longrepr = item.repr_failure(excinfo)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Mark the test body, so checkpoints know when async generators and tasks count."""
    check = item.stash.get(_CHECK, None)
    if check is None:
        return (yield)
    error = item.stash.get(_ERROR, "")
    if error:
        pytest.fail(error, pytrace=False)
    check.begin_call()
    try:
        return (yield)
    finally:
        check.end_call()


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, object, object]:
    """Run the body ``repeat`` times, counting ``types`` after the first (warm-up) run."""
    check = pyfuncitem.stash.get(_CHECK, None)
    if check is None or check.repeating or check.settings.repeat <= 1:
        return (yield)
    result = yield
    runs = check.settings.repeat - 1
    check.repeating = True
    try:
        before = check.count_before() if check.settings.types else None
        for _ in range(runs):
            pyfuncitem.ihook.pytest_pyfunc_call(pyfuncitem=pyfuncitem)
        if before is not None:
            check.count_after(before, runs)
    finally:
        check.repeating = False
    return result


class LeakGuard:
    """The ``leak_guard`` fixture: track objects explicitly and assert they are gone."""

    def __init__(self, check: TestLeakCheck) -> None:
        self._check = check

    def track(self, obj: T, name: str = "") -> T:
        """Fail the test if ``obj`` is alive after teardown; returns ``obj`` for inline use.

        Objects that cannot be weakly referenced (dicts, lists) are held and checked by
        reference count: alive means someone besides the plugin still holds them.
        """
        self._check.track(obj, name)
        return obj

    def assert_no_leaks(self) -> None:
        """Fail now if anything tracked so far is alive after a collection.

        Drop your own references first (``del obj``): the test's locals count as holders.
        """
        message = self._check.failure()
        if message:
            pytest.fail(message, pytrace=False)


@pytest.fixture
def leak_guard(request: pytest.FixtureRequest) -> LeakGuard:
    """Explicit leak tracking for this test (which it also enables)."""
    check = request.node.stash.get(_CHECK, None)
    if check is None:  # pragma: no cover - the protocol hook always creates one
        pytest.fail("llm-guard: leak_guard needs the llm_guard plugin's test protocol")
    return LeakGuard(check)
