"""Real uvicorn subprocesses on 127.0.0.1, for end-to-end tests and the benchmarks."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
LOG_DIR = ROOT / ".cache"


def free_port() -> int:
    """A loopback port that was free a moment ago (another process may still take it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process_tree(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """SIGTERM ``proc`` (its lifespan shuts down), kill it after ``timeout``; then its children."""
    children: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        children = psutil.Process(proc.pid).children(recursive=True)
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.kill()


class ServerStartError(RuntimeError):
    """Uvicorn exited or did not answer in time; ``returncode`` is None if it still ran."""

    def __init__(self, message: str, returncode: int | None, log: str) -> None:
        super().__init__(f"{message}; log:\n{log}" if log else message)
        self.returncode = returncode
        self.log = log


class UvicornServer:
    """One ``python -m uvicorn APP`` subprocess on a free loopback port.

    ``env`` is the child's whole environment (default: this process's) with the repository on
    ``PYTHONPATH``; ``args`` are extra uvicorn options (``--factory``, ``--http h11``, ...).
    Output goes to ``log_path`` (default ``.cache/uvicorn-<name>-<port>.log``), whose tail is
    in every start error. ``ready_path`` None: ready once the port accepts a connection
    (uvicorn binds after the lifespan startup completed); else once GET ``ready_path`` answers
    with any status.
    """

    def __init__(self, app: str, *, env: Mapping[str, str] | None = None,
                 args: Sequence[str] = (), name: str = "uvicorn", log_dir: Path = LOG_DIR,
                 ready_path: str | None = None) -> None:
        self.app = app
        self.env = {**(os.environ if env is None else env), "PYTHONPATH": str(ROOT)}
        self.args = tuple(args)
        self.name = name
        self.log_dir = log_dir
        self.ready_path = ready_path
        self.port = 0
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> None:
        """Start the process on a fresh port (see :meth:`wait_ready`)."""
        self.port = free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"{self.name}-{self.port}.log"
        with self.log_path.open("wb") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", self.app, "--host", "127.0.0.1",
                 "--port", str(self.port), "--log-level", "warning", *self.args],
                cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT,
            )

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the server answers; raise :class:`ServerStartError` if it does not."""
        assert self.proc is not None, "spawn() first"
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise ServerStartError(f"uvicorn {self.app} exited with {self.proc.returncode}",
                                       self.proc.returncode, self.log_tail())
            if self._answers():
                return
            if time.monotonic() > deadline:
                raise ServerStartError(f"uvicorn {self.app} did not start in {timeout}s",
                                       None, self.log_tail())
            time.sleep(0.1)

    def _answers(self) -> bool:
        try:
            if self.ready_path is None:
                socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
            else:
                httpx.get(self.url + self.ready_path, timeout=1.0, trust_env=False)
        except (OSError, httpx.TransportError):
            return False
        return True

    def start(self, timeout: float = 60.0, *, attempts: int = 3) -> None:
        """Spawn and wait; spawn again on a new port if the port was taken in between."""
        for attempt in range(attempts):
            self.spawn()
            try:
                self.wait_ready(timeout)
                return
            except ServerStartError as exc:
                self.stop()
                if attempt + 1 == attempts or "address already in use" not in exc.log.lower():
                    raise

    def wait_exit(self, timeout: float = 60.0) -> int:
        """Wait for the process to end by itself (a refused start-up); return its status.

        Raises ``subprocess.TimeoutExpired`` when it is still running after ``timeout``.
        """
        assert self.proc is not None, "spawn() first"
        return self.proc.wait(timeout=timeout)

    def log_text(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")
        return ""

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def cpu_seconds(self) -> tuple[float, float]:
        """User + system CPU time of the server process, and of its children (engine cores)."""
        assert self.proc is not None
        parent = psutil.Process(self.proc.pid)
        own = sum(parent.cpu_times()[:2])
        children = 0.0
        for child in parent.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                children += sum(child.cpu_times()[:2])
        return float(own), children

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the lifespan shuts down), kill after ``timeout``; then any child left."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_tree(proc, timeout)


@contextmanager
def uvicorn_server(
    app: str,
    env: Mapping[str, str] | None = None,
    *,
    ready_path: str = "/llm-guard/status",
    timeout: float = 60.0,
    extra_args: Sequence[str] = (),
) -> Iterator[str]:
    """Run ``uvicorn APP`` with ``env`` added to this environment; yield its base URL."""
    server = UvicornServer(app, env={**os.environ, **(env or {})}, args=extra_args,
                           ready_path=ready_path)
    try:
        server.start(timeout)
        yield server.url
    finally:
        server.stop(timeout=10)
