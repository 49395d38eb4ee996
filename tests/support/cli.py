"""Run the ``llm-guard`` command line in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

TOKEN_ENV = "LLM_GUARD_STATUS_TOKEN"


def run_cli(*args: str, env: Mapping[str, str] | None = None, timeout: float = 60.0
            ) -> subprocess.CompletedProcess[str]:
    """``python -m llm_guard_sdk.cli ARGS``; ``env`` is added to this environment.

    A status token in this environment is not passed on (only one in ``env`` is), so a
    developer's shell cannot change what a test sees.
    """
    child_env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    child_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "llm_guard_sdk.cli", *args], env=child_env,
                          capture_output=True, text=True, timeout=timeout, check=False)
