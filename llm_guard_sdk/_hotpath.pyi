"""Types of the compiled hot path (``_hotpath.c``); see :mod:`llm_guard_sdk.hotpath`."""

from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any

class Traffic:
    """Chunks and bytes, counted in C (read and set as ints from Python)."""

    chunks: int
    bytes: int

class BodySend:
    """An HTTP connection's send: counts body chunks, returns the server's awaitable."""

    def __init__(self, conn: object, traffic: Traffic, send: Callable[[Any], Awaitable[None]],
                 other: Callable[[Any], Awaitable[None]],  # the pure-Python send
                 watched: Callable[[Awaitable[None]], Awaitable[None]]) -> None: ...
    def __call__(self, message: Any) -> Awaitable[None]: ...

class ChunkRunner:
    """A GuardedStream's iterator: counts each chunk, hands rare paths to Python."""

    running: bool

    def __init__(self, stream: object, traffic: Traffic, source: AsyncIterator[Any],
                 loop: object, tasks: object) -> None: ...
    def __aiter__(self) -> ChunkRunner: ...
    def __anext__(self) -> ChunkRunner: ...
    def __await__(self) -> Generator[Any, None, Any]: ...
    def send(self, value: object) -> Any: ...
    def throw(self, *args: object) -> Any: ...
    def close(self) -> None: ...
