"""The inbox between the receive pump and the app: many readers, cancelled readers, the end."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import anyio
import pytest

from llm_guard_sdk.asgi.inbox import Inbox, message_size
from llm_guard_sdk.types import Message
from tests.support import until

pytestmark = pytest.mark.anyio

DISCONNECT = {"type": "http.disconnect"}


def body(i: int) -> dict[str, Any]:
    return {"type": "http.request", "body": b"x" * i, "more_body": True, "seq": i}


async def test_each_of_many_waiting_readers_gets_the_next_message_in_order() -> None:
    inbox = Inbox()
    readers = [asyncio.create_task(inbox.get()) for _ in range(50)]
    await until(lambda: inbox.readers == 50)
    for i in range(50):
        inbox.put(body(i))
    results = await asyncio.gather(*readers)
    assert [m["seq"] for m in results] == list(range(50)), "first waiting, first served"
    assert inbox.pending == 0 and inbox.bytes == 0


async def test_final_message_wakes_every_reader_and_keeps_answering() -> None:
    inbox = Inbox()
    readers = [asyncio.create_task(inbox.get()) for _ in range(20)]
    await until(lambda: inbox.readers == 20)
    assert inbox.finish(DISCONNECT)
    assert await asyncio.gather(*readers) == [DISCONNECT] * 20
    assert await inbox.get() == DISCONNECT
    assert not inbox.finish({"type": "http.disconnect", "second": True}), "the first one wins"
    assert await inbox.get() == DISCONNECT


async def test_queued_messages_come_before_the_final_one_and_later_ones_are_dropped() -> None:
    inbox = Inbox()
    inbox.put(body(1))
    inbox.put(body(2))
    inbox.finish(DISCONNECT)
    inbox.put(body(3))
    assert inbox.pending == 2 and inbox.bytes == 3
    assert [(await inbox.get()).get("seq") for _ in range(4)] == [1, 2, None, None]
    assert inbox.bytes == 0


async def test_finish_can_drop_what_the_app_has_not_taken() -> None:
    inbox = Inbox()
    inbox.put(body(10))
    inbox.finish(DISCONNECT, drop_pending=True)
    assert (inbox.pending, inbox.bytes) == (0, 0)
    assert await inbox.get() == DISCONNECT


async def test_reader_woken_then_cancelled_passes_the_message_on() -> None:
    """The wake-up is consumed by a reader that is cancelled before it runs (``wait_for``)."""
    inbox = Inbox()
    first = asyncio.create_task(inbox.get())
    second = asyncio.create_task(inbox.get())
    await until(lambda: inbox.readers == 2)
    inbox.put(body(7))
    first.cancel()  # same tick: ``first`` was woken but has not run yet
    assert (await second)["seq"] == 7
    with pytest.raises(asyncio.CancelledError):
        await first
    assert inbox.readers == 0 and inbox.pending == 0


async def test_reader_cancelled_before_wake_up_leaves_the_message_queued() -> None:
    inbox = Inbox()
    reader = asyncio.create_task(inbox.get())
    await until(lambda: inbox.readers == 1)
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader
    inbox.put(body(1))
    assert inbox.readers == 0
    assert (await inbox.get())["seq"] == 1


async def test_starlette_is_disconnected_style_poll_loses_nothing() -> None:
    """``receive()`` in an already cancelled scope, beside a long-lived reader."""
    inbox = Inbox()
    listener = asyncio.create_task(inbox.get())
    await until(lambda: inbox.readers == 1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await inbox.get()
    assert scope.cancelled_caught
    inbox.finish(DISCONNECT)
    assert await asyncio.wait_for(listener, 10) == DISCONNECT


async def test_timeouts_and_cancelled_readers_never_lose_or_duplicate() -> None:
    """Readers that give up at random (``wait_for``, ``move_on_after``) against a producer."""
    inbox = Inbox()
    total = 2000
    received: list[int] = []
    rng = random.Random(9)

    async def producer() -> None:
        for i in range(total):
            inbox.put(body(i))
            if rng.random() < 0.5:
                await asyncio.sleep(0)
        inbox.finish(DISCONNECT)

    async def impatient(use_anyio: bool) -> None:
        while True:
            message: Message | None = None
            if use_anyio:
                with anyio.move_on_after(0 if rng.random() < 0.3 else 0.001):
                    message = await inbox.get()
            else:
                try:
                    message = await asyncio.wait_for(inbox.get(), 0.001)
                except TimeoutError:
                    continue
            if message is None:
                continue
            if message["type"] == "http.disconnect":
                return
            received.append(message["seq"])

    readers = [asyncio.create_task(impatient(i % 2 == 0)) for i in range(8)]
    await producer()
    await asyncio.wait_for(asyncio.gather(*readers), 60)
    assert sorted(received) == list(range(total)), "a message was lost or duplicated"


def test_message_size_counts_payloads() -> None:
    assert message_size({"type": "http.request", "body": b"abc"}) == 3
    assert message_size({"type": "websocket.receive", "text": "héllo"}) == 5
    assert message_size({"type": "websocket.receive", "bytes": b"\x00" * 4}) == 4
    assert message_size({"type": "websocket.connect"}) == 0
