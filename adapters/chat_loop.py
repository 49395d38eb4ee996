"""The chat receive loop shared by the FastAPI and Litestar WebSocket helpers.

Both frameworks hand over raw ASGI messages, so one loop serves them: wait for the next frame
no longer than the heartbeat allows, ping or close a silent client, feed each frame to the
:class:`~.chat.ChatProtocol` and close the socket when it rejects one. Each adapter keeps only
its own accept step and the exception its framework raises for a closed socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .chat import ChatProtocol


async def serve_chat(chat: ChatProtocol, receive: Callable[[], Awaitable[Any]],
                     close: Callable[[int, str], Awaitable[None]]) -> None:
    """Run ``chat`` until the client leaves or a frame is rejected (then ``close``)."""
    while True:
        try:
            async with asyncio.timeout(chat.next_wait()):
                message = await receive()
        except TimeoutError:  # silent past the heartbeat: ping, or close a dead client
            reject = await chat.on_silence()
        else:
            if message["type"] != "websocket.receive":
                return
            reject = await chat.on_frame(message.get("text"), message.get("bytes"))
        if reject is not None:
            await close(reject.code, reject.reason)
            return
