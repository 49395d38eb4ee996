"""Helpers shared by the test suite and the benchmarks; nothing here is a test.

- :mod:`.sources`: ``FakeSource`` (a memory source the test sets) and ``make_guard``
- :mod:`.model`: ``Model``, a token generator stand-in that proves each stream was closed
- :mod:`.sse`: the one SSE parser (``SSEParser``, ``sse_events``) and ``read_sse`` over httpx
- :mod:`.asgi`: scope builders, receive/send recorders, in-process clients and communicators
- :mod:`.server`: ``free_port`` and real uvicorn subprocesses (``uvicorn_server``,
  ``UvicornServer``), also used by ``benchmarks/``
- :mod:`.polling`: ``until``, ``wait_for``, ``wait_for_level`` and ``status``
- :mod:`.demo`: the demo apps served end to end, their environment and chat protocol
- :mod:`.cgroup`: ``make_tree``, a fake cgroup filesystem
- :mod:`.cli`: ``run_cli``, the ``llm-guard`` command in a subprocess
- :mod:`.pressure_app`: an app under real uvicorn whose pressure a test sets
"""

from tests.support.asgi import (
    ProtocolSend,
    SendRecorder,
    channels_communicators,
    client_for,
    http_scope,
    receive_request,
    ws_connect,
    ws_frames,
    ws_scope,
    ws_send,
)
from tests.support.cli import run_cli
from tests.support.demo import APPS, BASE_ENV, EVICTED_REASON, VLLM_ENV, chat_turn, stats
from tests.support.model import Model
from tests.support.polling import status, until, wait_for, wait_for_level
from tests.support.server import (
    ROOT,
    ServerStartError,
    UvicornServer,
    free_port,
    uvicorn_server,
)
from tests.support.sources import FakeSource, make_guard
from tests.support.sse import SSEParser, read_sse, sse_events

__all__ = [
    "APPS",
    "BASE_ENV",
    "EVICTED_REASON",
    "ROOT",
    "VLLM_ENV",
    "FakeSource",
    "Model",
    "ProtocolSend",
    "SSEParser",
    "SendRecorder",
    "ServerStartError",
    "UvicornServer",
    "channels_communicators",
    "chat_turn",
    "client_for",
    "free_port",
    "http_scope",
    "make_guard",
    "read_sse",
    "receive_request",
    "run_cli",
    "sse_events",
    "stats",
    "status",
    "until",
    "uvicorn_server",
    "wait_for",
    "wait_for_level",
    "ws_connect",
    "ws_frames",
    "ws_scope",
    "ws_send",
]
