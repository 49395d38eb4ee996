"""In-process ASGI kit: scope builders, receive/send recorders, clients and communicators."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import types
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpx
from asgiref.testing import ApplicationCommunicator

Scope = dict[str, Any]
Message = dict[str, Any]

CLIENT = ("127.0.0.1", 5555)


def _scope(kind: str, scheme: str, path: str, spec_version: str) -> Scope:
    return {"type": kind, "asgi": {"version": "3.0", "spec_version": spec_version},
            "http_version": "1.1", "scheme": scheme, "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "headers": [(b"host", b"testserver")],
            "client": CLIENT, "server": ("127.0.0.1", 80)}


def http_scope(path: str = "/", *, spec_version: str = "2.4", **extra: Any) -> Scope:
    """A complete HTTP ``GET path`` scope from a loopback client; ``extra`` overrides keys."""
    return {**_scope("http", "http", path, spec_version), "method": "GET", **extra}


def ws_scope(path: str = "/ws/chat", *, spec_version: str = "2.4", **extra: Any) -> Scope:
    """A complete WebSocket scope from a loopback client; ``extra`` overrides keys."""
    return {**_scope("websocket", "ws", path, spec_version), "subprotocols": [], **extra}


def receive_request(body: bytes = b"", *, then: Message | None = None
                    ) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that answers one ``http.request`` with ``body``, then ``then`` forever.

    With ``then=None`` the client never leaves: later calls wait until they are cancelled
    (what a connected, silent client looks like to the app).
    """
    requested = False

    async def receive() -> Message:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": body, "more_body": False}
        if then is not None:
            return then
        await asyncio.get_running_loop().create_future()
        raise AssertionError("unreachable: the future is never resolved")

    return receive


async def serve_lifespan(receive: Callable[[], Awaitable[Message]],
                         send: Callable[[Message], Awaitable[None]]) -> None:
    """A raw test app's lifespan: complete startup and shutdown, nothing else."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class SendRecorder:
    """A ``send`` that records every message (or only counts them, ``keep=False``)."""

    def __init__(self, *, keep: bool = True) -> None:
        self.keep = keep
        self.count = 0
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.count += 1
        if self.keep:
            self.messages.append(message)

    @property
    def types(self) -> list[str]:
        return [m["type"] for m in self.messages]

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages
                        if m["type"] == "http.response.body")


class ProtocolSend(SendRecorder):
    """A recording HTTP ``send`` that checks ASGI order and can fail on demand.

    Violations are collected in :attr:`violations`, not raised: the code under test may
    swallow exceptions from ``send``. Order checked: one ``http.response.start``, then bodies,
    nothing after the last body (``more_body`` false), nothing after :meth:`close` (call it when
    the app returned). ``fail_on`` names a message type whose send raises ``OSError`` (after
    recording it, as a server that wrote part of it would).
    """

    def __init__(self, *, fail_on: str | None = None) -> None:
        super().__init__()
        self.fail_on = fail_on
        self.violations: list[str] = []
        self.started = self.complete = self.closed = False

    def close(self) -> None:
        self.closed = True

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if self.closed:
            self.violations.append(f"{kind} after the app returned")
        if kind == "http.response.start":
            if self.started:
                self.violations.append("second http.response.start")
            self.started = True
        elif kind == "http.response.body":
            if not self.started or self.complete:
                self.violations.append("http.response.body outside a response")
            self.complete = self.complete or not message.get("more_body", False)
        await super().__call__(message)
        if kind == self.fail_on:
            raise OSError(f"send failed on {kind}")

    @property
    def status(self) -> int | None:
        starts = [m["status"] for m in self.messages if m["type"] == "http.response.start"]
        return starts[0] if starts else None

    def json(self) -> Any:
        return json.loads(self.body)


def client_for(app: Any, client: tuple[str, int] = CLIENT) -> httpx.AsyncClient:
    """An httpx client calling ``app`` in process (``http://testserver``)."""
    transport = httpx.ASGITransport(app=app, client=client)
    return httpx.AsyncClient(transport=transport, base_url="http://testserver", timeout=10)


async def ws_connect(app: Any, path: str = "/ws/chat") -> ApplicationCommunicator:
    """Open a WebSocket on ``app`` and assert the handshake is accepted."""
    comm = ApplicationCommunicator(app, ws_scope(path))
    await comm.send_input({"type": "websocket.connect"})
    assert (await comm.receive_output(5))["type"] == "websocket.accept"
    return comm


async def ws_send(comm: ApplicationCommunicator, payload: Any) -> None:
    """Send bytes as a binary frame, a str as text, anything else as JSON text."""
    if isinstance(payload, bytes):
        await comm.send_input({"type": "websocket.receive", "bytes": payload})
    else:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        await comm.send_input({"type": "websocket.receive", "text": text})


async def ws_frames(communicator: Any, *, until: Iterable[str] = ("done", "error")
                    ) -> list[dict[str, Any]]:
    """JSON frames from an asgiref/Channels communicator up to one whose type is in ``until``."""
    stop = set(until)
    frames: list[dict[str, Any]] = []
    while True:
        message = await communicator.receive_output(5)
        assert message["type"] == "websocket.send", message
        frames.append(json.loads(message["text"]))
        if frames[-1]["type"] in stop:
            return frames


def channels_communicators() -> tuple[Any, Any]:
    """``channels.testing``'s HttpCommunicator and WebsocketCommunicator.

    ``channels.testing`` imports its Daphne live-server test case eagerly; the communicators do
    not need Daphne, so without it their modules are loaded from the package folder directly.
    """
    try:
        from channels.testing import HttpCommunicator, WebsocketCommunicator
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("daphne"):
            raise
        spec = importlib.util.find_spec("channels.testing")
        assert spec is not None and spec.submodule_search_locations is not None
        package = types.ModuleType("channels.testing")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["channels.testing"] = package
        from channels.testing.http import HttpCommunicator
        from channels.testing.websocket import WebsocketCommunicator
    return HttpCommunicator, WebsocketCommunicator
