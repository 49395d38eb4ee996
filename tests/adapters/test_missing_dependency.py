"""Each adapter names its pip extra when its framework is missing; the core needs none."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.support import ROOT

FRAMEWORKS = ("fastapi", "starlette", "litestar", "channels", "django", "daphne")

BLOCKER = textwrap.dedent("""
    import importlib.abc, sys

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {hidden!r}:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Hide())
""")


def run_hidden(hidden: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    script = BLOCKER.format(hidden=set(hidden)) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize(("adapter", "extra", "what"), [
    ("fastapi", "fastapi", "FastAPI"),
    ("litestar", "litestar", "Litestar"),
    ("channels", "channels", "Django Channels"),
])
def test_adapter_without_its_framework_names_the_extra(adapter: str, extra: str,
                                                       what: str) -> None:
    result = run_hidden(FRAMEWORKS, f"""
        from llm_guard_sdk import MissingDependencyError
        try:
            import llm_guard_sdk.adapters.{adapter}
        except MissingDependencyError as exc:
            assert isinstance(exc, ImportError)
            print(exc)
        else:
            raise SystemExit("imported without its framework")
    """)
    assert result.returncode == 0, result.stderr
    assert f"pip install 'llm-guard-sdk[{extra}]'" in result.stdout
    assert result.stdout.startswith(f"{what} is not installed")


def test_core_imports_with_no_framework_at_all() -> None:
    result = run_hidden(FRAMEWORKS, """
        import sys
        import llm_guard_sdk
        from llm_guard_sdk import GuardMiddleware, guard_stream
        import llm_guard_sdk.adapters
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in
                        {"fastapi", "starlette", "litestar", "channels", "django"})
        print("ok", loaded)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok []"


def test_blocker_does_not_hide_what_is_installed() -> None:
    result = run_hidden((), "import llm_guard_sdk.adapters.fastapi, "
                            "llm_guard_sdk.adapters.litestar, "
                            "llm_guard_sdk.adapters.channels; print('ok')")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
