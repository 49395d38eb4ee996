"""Pump-less idle WebSockets under real uvicorn with the ``websockets`` client.

An idle connection's app reads the server itself (no receive pump); the guard must still see
the client leave, see it leave while the app streams without reading, wake the waiting app when
it closes the session itself, and never read the server's ``receive`` from two tasks at once
(``tests/asgi/apps/flow_app.py`` counts overlapping calls). Assertions are on counters and
states; waits only decide when to look.
"""

from __future__ import annotations

import socket

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.asgi.test_receive_e2e import PATIENCE, counts, serve, status, wait_until

pytestmark = pytest.mark.e2e


def open_sessions(client: httpx.Client) -> int:
    doc = status(client)["sessions"]
    return int(doc["active"] + doc["idle"])


def test_idle_websocket_reads_directly_sees_disconnect_and_evict_wakes_the_app() -> None:
    with serve() as (base, client):
        url = base.replace("http://", "ws://")
        # 1. A chat turn, then idle: the app waits in receive() with no pump; the client leaves.
        with connect(url + "/ws/idle", open_timeout=PATIENCE, close_timeout=PATIENCE) as ws:
            for i in range(3):
                ws.send(f"p{i}")
                assert ws.recv(timeout=PATIENCE) == f"echo:p{i}"
        wait_until(lambda: counts(client).get("idle_disconnect_code") == 1000,
                   "the app saw the client's close")
        wait_until(lambda: open_sessions(client) == 0, "the session closed")
        # 2. The guard closes an idle session whose app waits in receive(): 1013, app woken.
        with connect(url + "/ws/idle", open_timeout=PATIENCE, close_timeout=PATIENCE) as ws:
            ws.send("hello")
            assert ws.recv(timeout=PATIENCE) == "echo:hello"
            assert client.post("/test/evict").text == "1"
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=PATIENCE)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        wait_until(lambda: counts(client).get("idle_disconnect_code") == 1013,
                   "the waiting app was woken with the guard's close")
        wait_until(lambda: open_sessions(client) == 0, "the session closed")
        assert status(client)["sessions"]["evicted_total"] == 1
        doc = counts(client)
        assert doc.get("server_receive_overlaps", 0) == 0
        assert doc.get("idle_pumps_seen", 0) == 0, "an idle app's read needs no pump"


def test_websocket_that_streams_without_reading_sees_the_client_leave() -> None:
    with serve() as (base, client):
        url = base.replace("http://", "ws://") + "/ws/stream"
        sock = socket.create_connection((base.split("//")[1].split(":")[0],
                                         int(base.rsplit(":", 1)[1])))
        with connect(url, sock=sock, open_timeout=PATIENCE, close_timeout=PATIENCE) as ws:
            ws.send("go")
            for _ in range(5):
                assert ws.recv(timeout=PATIENCE) == "t"
            # Leave without a close handshake, as a killed client does.
            sock.shutdown(socket.SHUT_RDWR)
        wait_until(lambda: counts(client).get("ws_stream_closed") == 1,
                   "the guarded stream was stopped")
        wait_until(lambda: open_sessions(client) == 0, "the session closed")
        doc = status(client)
        assert doc["streams"]["open"] == 0
        assert doc["streams"]["disconnected_total"] == 1
        assert counts(client).get("server_receive_overlaps", 0) == 0
