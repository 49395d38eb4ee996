"""Fault injection: an engine that dies, end to end (issue 13 §3).

A model server (OpenAI's streaming ``/v1/completions`` over the simulator, in its own uvicorn)
is SIGKILLed while the demo app streams from it (``LLM_GUARD_DEMO_BACKEND=remote``), then
started again on its port. Every stream in flight ends with a clear ``error`` event, new
requests get 503 with ``Retry-After`` while the breaker is open, and it goes half-open and
closes once the server answers again; nothing is left open in the front server.
tests/actions/test_control_e2e.py proves the breaker's state machine with a fake backend in
process; this adds a real process death over HTTP.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import httpx
import pytest

from tests.proof.checks import SOAK_ENV, unexpected_errors
from tests.proof.wire import SSEStream
from tests.support import ROOT, UvicornServer, free_port, status, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


class EngineServer(UvicornServer):
    """The demo app as a model server on a fixed port, so it can come back where it was."""

    def __init__(self, port: int) -> None:
        super().__init__("tests.proof.apps.engine_app:app", name="fault-engine",
                         ready_path="/health")
        self.fixed_port = port

    def spawn(self) -> None:
        self.port = self.fixed_port
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"{self.name}-{self.port}.log"
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", self.app, "--host", "127.0.0.1",
                 "--port", str(self.port), "--log-level", "warning"],
                cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)  # as the OOM killer would
        self.proc.wait()
        self.proc = None


async def test_engine_death_opens_the_breaker_and_it_recovers() -> None:
    engine = EngineServer(free_port())
    engine.start()
    front = UvicornServer("tests.support.apps.e2e_app:app", name="fault-front", env={
        **os.environ, **SOAK_ENV, "LLM_GUARD_DEMO_BACKEND": "remote",
        "LLM_GUARD_DEMO_REMOTE_URL": f"{engine.url}/v1", "LLM_GUARD_DEMO_MODEL": "sim",
        "LLM_GUARD_BREAKERS": "1", "LLM_GUARD_BREAKER_OPEN_FOR": "2"},
        ready_path="/llm-guard/live")
    front.start()
    chat = f"{front.url}/chat?prompt=hi&max_tokens="
    try:
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            in_flight = [SSEStream(front.port, f"/chat?prompt=s{i}&max_tokens=400")
                         for i in range(8)]
            for stream in in_flight:
                assert await stream.open() == 200
                await stream.read(2)
            engine.kill()
            cut = await asyncio.gather(*(s.read() for s in in_flight))
            for stream in in_flight:
                await stream.close()
            # every stream in flight ends with a clear error event, none hangs
            assert all(r.names[-1] == "error" for r in cut), [r.names[-3:] for r in cut]
            refused = await client.get(chat + "3")
            assert refused.status_code == 503 and "retry-after" in refused.headers
            breaker = (await status(client, front.url))["breakers"]
            assert [b["state"] for b in breaker.values()] == ["open"]

            engine.start()

            async def recovered() -> bool:
                response = await client.get(chat + "3")
                return response.status_code == 200 and response.text.count("data:") >= 4

            await wait_for(recovered, timeout=60, interval=0.5)
            breaker = (await status(client, front.url))["breakers"]
            assert [b["state"] for b in breaker.values()] == ["closed"]
            assert next(iter(breaker.values()))["opened_total"] >= 1
            doc = await status(client, front.url)
            assert doc["sessions"]["active"] + doc["sessions"]["idle"] == 0
            assert doc["streams"]["open"] == 0 and doc["errors"]["internal_total"] == 0
    finally:
        front.stop()
        engine.stop()
    assert unexpected_errors(front.log_text()) == []
