"""Raw-socket clients for the proof tests: cheap enough for hundreds of streams on 2 cores.

They speak just enough HTTP/1.1 and RFC 6455 to stream SSE and chat WebSocket turns, and can
do what a library client will not: reset the connection (``SO_LINGER`` 0, as a killed client
does), freeze (a tiny receive buffer that is never read), trickle headers (slowloris) or send
malformed frames.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from tests.support.sse import Event, SSEParser

HEAD_LIMIT = 65536


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with ``SO_LINGER`` (1, 0): the kernel sends RST instead of FIN.

    A connection the server already closed has no descriptor left: it is only aborted.
    """
    sock = writer.get_extra_info("socket")
    if sock is not None and not writer.is_closing() and sock.fileno() >= 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def connect(port: int, *, rcvbuf: int | None = None
                  ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a loopback connection; ``rcvbuf`` set before connecting (frozen readers)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock, limit=2**20)


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """The status code and (lower-cased) headers of a response."""
    raw = await reader.readuntil(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    code = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return code, headers


@dataclass
class SSEResult:
    """What one SSE client saw; ``eof`` false when it stopped reading on purpose."""

    status: int = 0
    events: list[Event] = field(default_factory=list)
    eof: bool = False
    complete: bool = False  # the terminating zero-length chunk arrived

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.events]


class SSEStream:
    """One ``GET`` of an SSE endpoint over a raw socket; reads chunked or close-delimited."""

    def __init__(self, port: int, path: str, *, rcvbuf: int | None = None) -> None:
        self.port, self.path, self.rcvbuf = port, path, rcvbuf
        self.result = SSEResult()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._parser = SSEParser()
        self._tail = b""
        self._chunked = False

    async def open(self) -> int:
        """Send the request and read the response head; return the status."""
        self.reader, self.writer = await connect(self.port, rcvbuf=self.rcvbuf)
        self.writer.write(f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Accept: text/event-stream\r\nConnection: close\r\n\r\n".encode())
        await self.writer.drain()
        self.result.status, headers = await read_head(self.reader)
        self._chunked = "chunked" in headers.get("transfer-encoding", "")
        return self.result.status

    async def read(self, events: int | None = None, *, pause: float = 0.0) -> SSEResult:
        """Read until ``events`` more events arrived (None: to the end); ``pause`` per read."""
        assert self.reader is not None
        goal = None if events is None else len(self.result.events) + events
        while goal is None or len(self.result.events) < goal:
            data = await self._body_bytes()
            if not data:
                self.result.eof = True
                self.result.events += self._parser.flush()
                break
            self._feed(data)
            if pause:
                await asyncio.sleep(pause)
        return self.result

    async def _body_bytes(self) -> bytes:
        assert self.reader is not None
        try:
            if not self._chunked:
                return await self.reader.read(65536)
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                self.result.complete = True
                return b""
            data = await self.reader.readexactly(size + 2)
            return data[:-2]
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            return b""

    def _feed(self, data: bytes) -> None:
        *lines, self._tail = (self._tail + data).split(b"\n")
        for line in lines:
            self.result.events += self._parser.feed_line(line.decode().removesuffix("\r"))

    def reset(self) -> None:
        if self.writer is not None:
            reset(self.writer)

    async def close(self) -> None:
        if self.writer is not None and not self.writer.is_closing():
            self.writer.close()
            with contextlib.suppress(ConnectionError):
                await self.writer.wait_closed()


def ws_frame(payload: bytes, opcode: int = 0x1, *, fin: bool = True,
             rsv: int = 0) -> bytes:
    """One masked client frame (RFC 6455); ``rsv`` bits let a test send a malformed one."""
    mask = os.urandom(4)
    head = bytes([(0x80 if fin else 0) | rsv | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class WSChat:
    """A chat WebSocket over a raw socket: handshake, prompts, frames, close or reset."""

    def __init__(self, port: int, path: str, *, rcvbuf: int | None = None) -> None:
        self.port, self.path, self.rcvbuf = port, path, rcvbuf
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.close_code: int | None = None
        self.close_reason = ""

    async def open(self) -> int:
        """Handshake; return the HTTP status (101 when accepted)."""
        self.reader, self.writer = await connect(self.port, rcvbuf=self.rcvbuf)
        key = base64.b64encode(os.urandom(16)).decode()
        self.writer.write((f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                           "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        await self.writer.drain()
        status, _ = await read_head(self.reader)
        return status

    async def send_json(self, document: dict[str, Any]) -> None:
        await self.send_raw(ws_frame(json.dumps(document).encode()))

    async def send_raw(self, data: bytes) -> None:
        assert self.writer is not None
        self.writer.write(data)
        await self.writer.drain()

    async def frame(self) -> dict[str, Any] | None:
        """The next text frame as JSON; None once the server closed (``close_code`` set)."""
        assert self.reader is not None and self.writer is not None
        while True:
            try:
                b0, b1 = await self.reader.readexactly(2)
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", await self.reader.readexactly(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", await self.reader.readexactly(8))[0]
                payload = await self.reader.readexactly(n)
            except (asyncio.IncompleteReadError, ConnectionError):
                self.close_code = self.close_code or 1006
                return None
            opcode = b0 & 0x0F
            if opcode == 0x9:  # ping: answer, as every client must
                await self.send_raw(ws_frame(payload, 0xA))
            elif opcode == 0x8:
                self.close_code = struct.unpack("!H", payload[:2])[0] if payload else 1005
                self.close_reason = payload[2:].decode(errors="replace")
                return None
            elif opcode == 0x1:
                document: dict[str, Any] = json.loads(payload)
                return document

    async def turn(self, document: dict[str, Any], *, pause: float = 0.0
                   ) -> list[dict[str, Any]]:
        """Send one prompt; frames up to ``done``/``error`` or the server's close."""
        await self.send_json(document)
        frames: list[dict[str, Any]] = []
        while (frame := await self.frame()) is not None:
            frames.append(frame)
            if frame.get("type") in ("done", "error"):
                break
            if pause:
                await asyncio.sleep(pause)
        return frames

    async def close(self) -> None:
        """Send a close frame, wait for the server's, then close the socket."""
        if self.writer is None or self.writer.is_closing():
            return
        try:
            await self.send_raw(ws_frame(struct.pack("!H", 1000), 0x8))
            while await self.frame() is not None:
                pass
        except ConnectionError:
            pass
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()

    def reset(self) -> None:
        if self.writer is not None:
            reset(self.writer)
