"""The receive path under real uvicorn: disconnect polling, upload back-pressure, quiet sockets.

Assertions are on what the app and the guard report (counters, session bytes), never on speed;
waits are generous and only decide when to look.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support import uvicorn_server

pytestmark = pytest.mark.e2e

APP = "tests.asgi.apps.flow_app"
UPLOAD_BYTES = 48 * 2**20
PATIENCE = 30.0


@contextlib.contextmanager
def serve(variant: str = "app", **env: str) -> Iterator[tuple[str, httpx.Client]]:
    with uvicorn_server(f"{APP}:{variant}", env, ready_path="/test/counts") as base, \
            httpx.Client(base_url=base, timeout=PATIENCE, trust_env=False) as client:
        yield base, client


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {PATIENCE}s")
        time.sleep(0.05)


def counts(client: httpx.Client) -> dict[str, int]:
    doc: dict[str, int] = client.get("/test/counts").json()
    return doc


def status(client: httpx.Client) -> dict[str, Any]:
    doc: dict[str, Any] = client.get("/llm-guard/status?sessions=1").json()
    return doc


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


def reset(sock: socket.socket) -> None:
    """Close with SO_LINGER 0: the client's kernel sends RST, as a killed client does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("variant", ["app", "plain"])
def test_generator_polling_is_disconnected_is_closed_after_client_reset(variant: str) -> None:
    """Guarded or not, the generator is closed once the client resets the connection."""
    with serve(variant) as (base, client):
        sock = socket.create_connection(("127.0.0.1", port_of(base)), timeout=PATIENCE)
        sock.sendall(b"GET /poll-then-stream HTTP/1.1\r\nhost: test\r\n\r\n")
        received = b""
        while b"chunk" not in received:
            data = sock.recv(4096)
            assert data, "the server closed the connection"
            received += data
        reset(sock)
        wait_until(lambda: counts(client).get("closed") == 1, "the generator was not closed")
        assert counts(client) == {"started": 1, "closed": 1}
        if variant == "app":
            wait_until(lambda: status(client)["sessions"]["active"] == 0, "session still open")
            assert status(client)["sessions"]["closed_total"] == 1


def test_upload_to_an_app_that_stops_reading_is_not_pulled_into_the_process() -> None:
    """The server's back-pressure still works: the guard holds one message beyond the app."""
    with serve() as (base, client):
        sock = socket.create_connection(("127.0.0.1", port_of(base)), timeout=PATIENCE)
        sock.sendall(b"POST /upload HTTP/1.1\r\nhost: test\r\n"
                     b"content-type: application/octet-stream\r\n"
                     b"content-length: %d\r\n\r\n" % UPLOAD_BYTES)
        piece = b"u" * 65536
        sock.sendall(piece)
        sent = len(piece)
        wait_until(lambda: counts(client).get("upload_chunks") == 1, "the app read nothing")
        sock.settimeout(5.0)  # only decides when to stop pushing; nothing asserts on it
        with contextlib.suppress(TimeoutError):
            while sent < UPLOAD_BYTES:
                sent += sock.send(piece[: UPLOAD_BYTES - sent])
        app = counts(client)
        (session,) = status(client)["session_list"]
        assert app["upload_chunks"] == 1
        assert session["chunks_in"] <= app["upload_chunks"] + 1, "read more than one ahead"
        assert session["buffered_bytes"] == session["bytes_in"] - app["upload_bytes"]
        assert session["bytes_in"] < UPLOAD_BYTES // 8, "the upload was pulled in"
        assert sent < UPLOAD_BYTES, "the server kept reading an upload nobody reads"
        client.post("/test/release")
        reset(sock)
        wait_until(lambda: status(client)["sessions"]["active"] == 0, "session still open")


def test_websocket_flood_to_an_app_that_does_not_read_is_closed_1009() -> None:
    with serve(LLM_GUARD_MAX_INBOUND_BUFFER="256KiB") as (base, client):
        url = base.replace("http://", "ws://") + "/ws/quiet"
        frame = b"f" * 65536
        with connect(url, open_timeout=PATIENCE, close_timeout=PATIENCE) as ws, \
                pytest.raises(ConnectionClosed) as closed:
            for _ in range(1000):  # 64 MiB at most; the bound is 256 KiB
                ws.send(frame)
            ws.recv(timeout=PATIENCE)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        assert status(client)["sessions"]["inbound_overflow_total"] == 1
        client.post("/test/release")
        wait_until(lambda: counts(client).get("ws_disconnect_code") == 1009,
                   "the app was not told 1009")
        wait_until(lambda: status(client)["sessions"]["active"] == 0, "session still open")
