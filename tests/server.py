"""Start a real uvicorn subprocess on 127.0.0.1 for end-to-end tests."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def uvicorn_server(
    app: str,
    env: Mapping[str, str] | None = None,
    *,
    ready_path: str = "/llm-guard/status",
    timeout: float = 60.0,
    extra_args: tuple[str, ...] = (),
) -> Iterator[str]:
    """Run ``uvicorn APP`` and yield its base URL once ``ready_path`` answers."""
    port = free_port()
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    log_path = ROOT / ".cache" / f"uvicorn-{port}.log"
    log_path.parent.mkdir(exist_ok=True)
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", *extra_args],
        cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"uvicorn {app} exited with {proc.returncode}")
            try:
                httpx.get(base + ready_path, timeout=1.0)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"uvicorn {app} did not start in {timeout}s") from None
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def status(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    """GET the guard's status document."""
    response = await client.get(f"{base}/llm-guard/status")
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


async def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> float:  # noqa: ASYNC109
    """Poll an async predicate; return how long it took."""
    start = time.monotonic()
    while True:
        if await predicate():
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)
