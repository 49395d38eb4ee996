"""One OOM-survival run: the workload app in a real memory cgroup, driven past its limit.

Shared by ``tests/proof/test_oom_survival.py`` (one bounded run per case) and
``benchmarks/oom_survival.py`` (repeated runs, memory sampled over time). A run starts
``tests.proof.oom_app`` under uvicorn inside a fresh cgroup (:mod:`tests.support.memcg`), opens
``sessions`` conversations at ``rate`` per second (each holds ``context_mib`` MiB while it
streams), waits until every one ended or the server died, and reports what happened: each
conversation's outcome, whether the server was OOM-killed, the cgroup's OOM-kill counter and
peak. A guarded run then waits for the guard to return to ``normal`` and asks for a fresh,
complete stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.memcg import MemoryCgroup, memory_cgroup
from tests.support.server import LOG_DIR, ROOT, UvicornServer, free_port
from tests.support.sse import SSEParser

MIB = 2**20
APP = "tests.proof.oom_app:app"


@dataclass(frozen=True)
class Workload:
    """What a run asks of the server; the sizes are chosen per backend (docs/reliability.md)."""

    backend: str  # "simulated" or "vllm"
    guarded: bool
    limit_bytes: int = 512 * MIB
    context_mib: int = 8
    sessions: int = 170
    rate: float = 10.0  # new conversations per second (see docs/reliability.md: margin)
    max_tokens: int = 80  # 0.25 s apart: 20 s per conversation, ~200 open at once
    token_delay: float = 0.25
    sample_interval: float = 0.1

    def env(self) -> dict[str, str]:
        """The server's environment: pressure judged on the cgroup alone (see module doc)."""
        env = {**os.environ, "LLM_GUARD_DEMO_BACKEND": self.backend,
               "OOM_WORKLOAD_GUARD": "on" if self.guarded else "off",
               "OOM_WORKLOAD_CONTEXT_MIB": str(self.context_mib),
               "OOM_WORKLOAD_TOKEN_DELAY": str(self.token_delay),
               "LLM_GUARD_SAMPLE_INTERVAL": str(self.sample_interval),
               "LLM_GUARD_DEMO_RATE": "0", "LLM_GUARD_SOURCES": "cgroup"}
        env.pop("LLM_GUARD_MEMORY_LIMIT", None)  # the guard must find the cgroup's limit itself
        return env


#: Per backend: the cgroup limit and the number of conversations. At 10 new conversations per
#: second lasting 20 s, ~200 are open at once (1.6 GiB of contexts), about 3x what fits.
#: Simulator: the server starts at ~37 MiB charged, so 512 MiB hold ~58 conversations of
#: 8 MiB. vLLM (tiny model; the engine core is a child process in the same cgroup): torch and
#: the engine are ~0.9 GiB charged before the first request, so the limit is that plus ~512 MiB
#: for conversations (1.5 GiB), ~70 of them.
SIZES: dict[str, dict[str, Any]] = {
    "simulated": {"limit_bytes": 512 * MIB, "sessions": 200},
    "vllm": {"limit_bytes": 1536 * MIB, "sessions": 240},
}


def workload(backend: str, *, guarded: bool, **overrides: Any) -> Workload:
    """The sizes of :data:`SIZES` for ``backend``, with ``overrides``."""
    return Workload(backend=backend, guarded=guarded, **{**SIZES[backend], **overrides})


@dataclass
class RunResult:
    """What one run measured; ``outcomes`` counts completed/evicted/refused/failed streams."""

    workload: Workload
    pid: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    returncode: int | None = None  # None: the server was still running at the end
    oom_kills_before: int = 0
    oom_kills_after: int = 0
    peak_bytes: int | None = None
    baseline_bytes: int = 0
    status_before: dict[str, Any] = field(default_factory=dict)
    status_idle: dict[str, Any] = field(default_factory=dict)  # once the load had stopped
    status_after: dict[str, Any] = field(default_factory=dict)  # after the fresh chat
    fresh_stream: list[tuple[str, str]] = field(default_factory=list)
    fresh_status: int = 0
    pid_after: int = 0  # the pid /oom/info answered with after the load (guarded runs)
    killed_at: float | None = None  # seconds from the first request
    samples: list[tuple[float, int]] = field(default_factory=list)
    timeline: list[tuple[float, float, int, int]] = field(default_factory=list)
    """Guarded: per guard tick, (seconds from the first request, pressure, level, streams)."""
    log_tail: str = ""

    @property
    def oom_killed(self) -> bool:
        return self.returncode == -9 and self.oom_kills_after > self.oom_kills_before

    def summary(self) -> dict[str, Any]:
        return {"backend": self.workload.backend, "guarded": self.workload.guarded,
                "pid": self.pid, "returncode": self.returncode,
                "oom_kills": self.oom_kills_after - self.oom_kills_before,
                "peak_bytes": self.peak_bytes, "baseline_bytes": self.baseline_bytes,
                "limit_bytes": self.workload.limit_bytes, "rate": self.workload.rate,
                "context_mib": self.workload.context_mib, "killed_at_s": self.killed_at,
                **{k: self.outcomes.get(k, 0)
                   for k in ("completed", "evicted", "refused", "failed")},
                "guard": guard_counts(self.status_after)}


def guard_counts(status: dict[str, Any]) -> dict[str, Any]:
    """The status figures the proof reports (empty for an unguarded server)."""
    if not status:
        return {}
    return {"level": status["level"], "limit_source": status["memory"]["limit_source"],
            "limit_bytes": status["memory"]["limit_bytes"],
            "evicted_total": status["sessions"]["evicted_total"],
            "shed_total": status["sessions"]["shed_total"],
            "active": status["sessions"]["active"], "idle": status["sessions"]["idle"]}


class CgroupServer(UvicornServer):
    """The spawner of the test suite, with the command run inside ``cgroup`` from its exec."""

    def __init__(self, cgroup: MemoryCgroup, **kwargs: Any) -> None:
        super().__init__(APP, **kwargs)
        self.cgroup = cgroup

    def spawn(self) -> None:
        self.port = free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"{self.name}-{self.port}.log"
        command = [sys.executable, "-m", "uvicorn", self.app, "--host", "127.0.0.1",
                   "--port", str(self.port), "--log-level", "warning", *self.args]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(self.cgroup.wrap(command), cwd=ROOT, env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT)


class UsageSampler:
    """The cgroup's charge every ``interval`` seconds, in a thread (it must not share the
    driver's event loop, which is busy with hundreds of streams)."""

    def __init__(self, cgroup: MemoryCgroup, interval: float = 0.1) -> None:
        self.cgroup, self.interval = cgroup, interval
        self.samples: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cgroup-usage", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError, ValueError):
                self.samples.append((time.monotonic() - self.t0, self.cgroup.usage_bytes()))
            self._stop.wait(self.interval)

    def __enter__(self) -> UsageSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def conversation(client: httpx.AsyncClient, url: str) -> tuple[str, list[tuple[str, str]]]:
    """One chat: its outcome (completed, evicted, refused, failed) and its events."""
    parser = SSEParser()
    events: list[tuple[str, str]] = []
    try:
        async with client.stream("GET", url) as response:
            if response.status_code == 503:
                await response.aread()
                return "refused", events
            if response.status_code != 200:
                return "failed", events
            async for line in response.aiter_lines():
                events += parser.feed_line(line)
    except httpx.HTTPError:
        return "failed", events
    names = [name for name, _ in events]
    if "evicted" in names:
        return "evicted", events
    return ("completed" if names and names[-1] == "done" else "failed"), events


async def drive(base: str, work: Workload, server: subprocess.Popen[bytes],
                t0: float) -> tuple[Counter[str], float | None]:
    """Open ``work.sessions`` conversations at ``work.rate``/s; wait for all (or the death)."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(30.0, read=120.0)
    outcomes: Counter[str] = Counter()
    killed_at: float | None = None
    async with httpx.AsyncClient(limits=limits, timeout=timeout, trust_env=False) as client:
        tasks = []
        for i in range(work.sessions):
            if server.poll() is not None:
                killed_at = killed_at or time.monotonic() - t0
                break
            url = f"{base}/oom/chat?prompt=conversation+{i}&max_tokens={work.max_tokens}"
            tasks.append(asyncio.create_task(conversation(client, url)))
            await asyncio.sleep(1.0 / work.rate)
        for outcome, _ in await asyncio.gather(*tasks):
            outcomes[outcome] += 1
        outcomes["not_sent"] += work.sessions - len(tasks)
    return outcomes, killed_at


async def _status(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    doc: dict[str, Any] = (await client.get(f"{base}/llm-guard/status")).json()
    return doc


async def recover(base: str, result: RunResult, wait_s: float = 120.0) -> None:
    """Guarded: wait until the guard is back at normal with no session, then chat once."""
    async with httpx.AsyncClient(timeout=60.0, trust_env=False) as client:
        deadline = time.monotonic() + wait_s
        while True:
            status = await _status(client, base)
            idle = status["level"] == "normal" and status["sessions"]["active"] == 0
            if idle or time.monotonic() > deadline:
                result.status_idle = status
                break
            await asyncio.sleep(0.5)
        outcome, result.fresh_stream = await conversation(
            client, f"{base}/oom/chat?prompt=after+the+storm&max_tokens=5")
        result.fresh_status = {"completed": 200, "evicted": 200, "refused": 503}.get(outcome, 0)
        result.outcomes["fresh_" + outcome] += 1
        result.status_after = await _status(client, base)
        result.pid_after = int((await client.get(f"{base}/oom/info")).json()["pid"])


def run(work: Workload, *, sample_every: float = 0.1, start_timeout: float = 900.0) -> RunResult:
    """One run in a fresh cgroup (destroyed after, the server with it)."""
    result = RunResult(work)
    with memory_cgroup(work.limit_bytes) as cgroup:
        timeline_path = LOG_DIR / f"oom-timeline-{os.getpid()}-{id(result)}.txt"
        timeline_path.parent.mkdir(parents=True, exist_ok=True)
        timeline_path.unlink(missing_ok=True)
        env = {**work.env(), "OOM_WORKLOAD_TIMELINE": str(timeline_path)}
        server = CgroupServer(cgroup, env=env, name=f"oom-{work.backend}",
                              ready_path="/oom/info")
        server.start(start_timeout, attempts=1)
        assert server.proc is not None
        try:
            result.pid = server.proc.pid
            result.oom_kills_before = cgroup.oom_kills()
            result.baseline_bytes = cgroup.usage_bytes()
            if work.guarded:
                result.status_before = asyncio.run(_status_once(server.url))
            with UsageSampler(cgroup, sample_every) as sampler:
                t0 = time.monotonic()
                outcomes, killed_at = asyncio.run(drive(server.url, work, server.proc, t0))
                result.outcomes.update(outcomes)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    server.proc.wait(timeout=2.0)  # a kill in flight shows up now
                if server.proc.poll() is not None and killed_at is None:
                    killed_at = time.monotonic() - t0
                result.killed_at = killed_at
                if server.proc.poll() is None and work.guarded:
                    asyncio.run(recover(server.url, result))
            result.samples = [(t - (t0 - sampler.t0), b) for t, b in sampler.samples]
            result.returncode = server.proc.poll()
            result.oom_kills_after = cgroup.oom_kills()
            result.peak_bytes = cgroup.peak_bytes()
            result.log_tail = server.log_tail(60)
            result.timeline = read_timeline(timeline_path, t0)
        finally:
            server.stop(timeout=30)
    return result


def read_timeline(path: Path, t0: float) -> list[tuple[float, float, int, int]]:
    """The guard's ticks the workload app wrote (see ``oom_app.timeline_writer``), from ``t0``."""
    rows: list[tuple[float, float, int, int]] = []
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 4:
                rows.append((round(float(parts[0]) - t0, 3), float(parts[1]), int(parts[2]),
                             int(parts[3])))
        path.unlink()
    return rows


async def _status_once(base: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30.0, trust_env=False) as client:
        return await _status(client, base)
