"""Real streaming clients for end-to-end tests that need sessions open while they look elsewhere.

:class:`StreamingLoad` keeps ``count`` Server-Sent-Events clients per server reading the demo
app's ``GET /chat`` (a long ``max_tokens``), in a thread with its own event loop, so a synchronous
test (polling Prometheus, say) runs beside them. It counts the tokens each server delivered, to
wait until the load is real, and drops every connection on close.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Mapping
from typing import cast

import httpx

from tests.support.server import UvicornServer


class StreamingLoad:
    """``count`` SSE clients per server reading ``/chat`` streams, in a thread of their own.

    ``events`` counts the tokens each server has delivered so far; ``close()`` drops every
    connection (the guard sees the disconnects) and joins the thread.
    """

    def __init__(self, servers: Mapping[str, UvicornServer], count: int) -> None:
        self.servers = dict(servers)
        self.count = count
        self.events = dict.fromkeys(servers, 0)
        self.errors: list[BaseException] = []
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._closing = False  # touched in the loop's thread only
        self._thread = threading.Thread(target=self._run, name="streaming-load", daemon=True)

    def __enter__(self) -> StreamingLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        try:
            self._loop.run_until_complete(self._main())
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        if self._closing:  # close() ran before this coroutine started
            self._stop.set()
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0), trust_env=False) as client:
            tasks = [asyncio.create_task(self._stream(client, pod, server.url))
                     for pod, server in self.servers.items() for _ in range(self.count)]
            await self._stop.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _stream(self, client: httpx.AsyncClient, pod: str, base: str) -> None:
        try:
            async with client.stream("GET", f"{base}/chat",
                                     params={"prompt": "hi", "max_tokens": "4096"}) as response:
                assert response.status_code == 200, response.status_code
                lines = cast(AsyncGenerator[str, None], response.aiter_lines())
                try:
                    async for line in lines:
                        if line.startswith("data:"):
                            self.events[pod] += 1
                finally:
                    await lines.aclose()  # httpx's generator closed here, not by the GC
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.errors.append(exc)

    def wait_streaming(self, minimum: int, timeout: float = 60.0) -> None:
        """Wait until every server has delivered ``minimum`` tokens (the load is real)."""
        end = time.monotonic() + timeout
        while min(self.events.values()) < minimum:
            assert not self.errors, self.errors
            if time.monotonic() > end:
                raise AssertionError(f"streams delivered {self.events} tokens in {timeout}s")
            time.sleep(0.1)

    def _request_stop(self) -> None:
        self._closing = True
        if self._stop is not None:
            self._stop.set()

    def close(self) -> None:
        """Cancel every stream (in the load's own loop) and wait for the thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._request_stop)
        self._thread.join(timeout=60)
