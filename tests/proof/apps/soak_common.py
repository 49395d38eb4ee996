"""What the soak and fault apps share: an instrumented token generator and the test routes' data.

Every framework's soak app streams :func:`soak_tokens` over SSE and WebSocket. The generator
counts itself: ``started`` on the first step, ``closed`` in its ``finally``, so ``open`` is what
a leak leaves behind; it pulls its tokens from the backend, by default the simulator (whose own
``open`` count is the backend's unfinished requests); :func:`use_backend` swaps in another
(:mod:`tests.proof.apps.soak_vllm`: a real vLLM engine). Query/frame parameters pick a client's
behaviour:

- ``n``: tokens to stream; ``size``: pad each token to this many characters (frozen readers
  need big chunks to fill the socket buffers); ``delay``: seconds between tokens;
- ``fail_at``: raise :class:`InjectedFailure` before token ``fail_at`` (a generator that
  raises mid-stream);
- ``hang_at``: stop producing before token ``hang_at`` (a backend that hangs: only the guard's
  chunk timeout ends it);
- the app's ``poll`` variants pass an ``is_disconnected`` callable the generator awaits
  before each token, like handlers that poll ``request.is_disconnected()``.

``measure()`` is the RSS after a full ``gc.collect()`` and a ``malloc_trim(0)`` (glibc): what a
leak would keep, not garbage the collector or the allocator has not returned yet; with the
number of gc-tracked objects and of allocated blocks, which do not depend on the allocator.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import psutil

from llm_guard_sdk.testing.simulator import SimulatedLLM

IsDisconnected = Callable[[], Awaitable[bool]]

#: The simulator at full speed; the soak paces tokens itself (``delay``).
llm = SimulatedLLM(rate=0)
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


class SoakBackend(Protocol):
    """Where the soak generators get their tokens, and how many requests it still holds."""

    def generate(self, prompt: str, n: int) -> AsyncGenerator[str, None]:
        """``n`` tokens for ``prompt``; closing it early must end the backend's request."""
        ...

    def report(self) -> dict[str, Any]:
        """Counters, ``open`` among them: the backend's unfinished requests."""
        ...


class SimulatorBackend:
    """The default backend: :data:`llm`, counted by the simulator itself."""

    def generate(self, prompt: str, n: int) -> AsyncGenerator[str, None]:
        return llm.generate(prompt, n)

    def report(self) -> dict[str, Any]:
        stats = llm.stats
        return {"started": stats.started, "closed": stats.closed, "finished": stats.finished,
                "open": stats.open}


backend: SoakBackend = SimulatorBackend()


def use_backend(chosen: SoakBackend) -> None:
    """Make every soak generator pull from ``chosen`` (an app does this before serving)."""
    global backend
    backend = chosen


class InjectedFailure(RuntimeError):
    """The failure a soak generator raises on purpose (``fail_at``)."""


@dataclass
class Counts:
    """Lifecycle counters of the soak generators."""

    started: int = 0
    closed: int = 0
    finished: int = 0
    raised: int = 0
    hung: int = 0
    saw_disconnect: int = 0


counts = Counts()


@dataclass(frozen=True)
class StreamParams:
    """One client's request, parsed from a query string or a chat frame."""

    n: int = 20
    size: int = 0
    delay: float = 0.0
    fail_at: int | None = None
    hang_at: int | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> StreamParams:
        """Read the parameters; raises ValueError (the apps answer 400 / an error frame)."""

        def opt(name: str) -> int | None:
            value = raw.get(name)
            return None if value in (None, "") else int(value)

        params = cls(n=int(raw.get("n", 20)), size=int(raw.get("size", 0)),
                     delay=float(raw.get("delay", 0.0)), fail_at=opt("fail_at"),
                     hang_at=opt("hang_at"))
        if not 0 < params.n <= 100_000 or not 0 <= params.size <= 2**20 or params.delay < 0:
            raise ValueError(f"invalid soak parameters: {params}")
        return params


async def soak_tokens(params: StreamParams, is_disconnected: IsDisconnected | None = None
                      ) -> AsyncIterator[str]:
    """Stream ``params.n`` backend tokens; counted from start to ``finally``."""
    counts.started += 1
    inner = backend.generate("soak", params.n)
    try:
        i = 0
        async for text in inner:
            if i == params.fail_at:
                counts.raised += 1
                raise InjectedFailure(f"injected failure at token {i}")
            if i == params.hang_at:
                counts.hung += 1
                await asyncio.Event().wait()  # never set: only a close ends this
            if is_disconnected is not None and await is_disconnected():
                counts.saw_disconnect += 1
                return
            yield text.ljust(params.size, ".") if params.size else text
            i += 1
            if params.delay:
                await asyncio.sleep(params.delay)
        counts.finished += 1
    finally:
        await inner.aclose()
        counts.closed += 1


def report() -> dict[str, Any]:
    """The generators' and the backend's counters, and this process's RSS."""
    generators = asdict(counts)
    generators["open"] = counts.started - counts.closed
    return {"generators": generators, "backend": backend.report(),
            "rss_bytes": psutil.Process(os.getpid()).memory_info().rss}


def measure() -> dict[str, Any]:
    """Collect garbage and return freed heap to the OS, then report (see module docstring)."""
    gc.collect()
    _libc.malloc_trim(0)
    return {**report(), "gc_objects": len(gc.get_objects()),
            "allocated_blocks": sys.getallocatedblocks()}
