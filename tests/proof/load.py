"""The soak's client mix, shared by tests/proof/test_soak.py and benchmarks/soak.py.

``streams`` workers run concurrently until ``duration`` is over; worker ``i`` cycles through
:data:`MIX` starting at ``i``, so at any moment the streams are spread over the kinds in
these proportions (of 20): 4 abrupt resets (20 %: TCP RST via ``SO_LINGER`` 0, after a
random number of tokens, over SSE, SSE with a handler polling ``is_disconnected()``, and
WebSocket), 2 slow readers, 1 frozen reader (never reads: only the guard's send timeout
ends it), 2 generators that raise mid-stream, 1 polling handler read to the end, and 10
normal streams, half SSE, half WebSocket. Every client checks what it got (the whole answer
and ``done``, the error event, ...) and reports an outcome; :class:`Tally` counts them.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tests.proof.wire import SSEStream, WSChat

MIX = ("reset-sse", "normal-sse", "reset-ws", "normal-ws", "slow-sse", "raise-sse",
       "reset-poll", "normal-sse", "normal-ws", "frozen", "poll", "normal-ws", "raise-ws",
       "normal-sse", "reset-sse", "slow-ws", "normal-ws", "normal-sse", "reset-ws",
       "normal-ws")
#: Outcomes that mean the client saw what it should (every other outcome is a failure).
#: ``survived``: a frozen reader whose stream never stalled a send for ``send_timeout`` while
#: it was frozen (a saturated server had not filled the socket buffers yet), so it got the
#: whole stream; the tests count ``cut`` readers against the guard's ``send_timeout_total``.
GOOD = ("ok", "reset", "cut", "survived")


@dataclass(frozen=True)
class LoadSpec:
    """The load: concurrency, duration, and each stream's shape."""

    streams: int = 200
    duration: float = 60.0
    tokens: int = 30
    delay: float = 0.1  # between tokens, server side
    slow_pause: float = 0.3  # a slow reader's pause between reads
    freeze: float = 8.0  # a frozen reader's silence; more than send_timeout + close_grace
    frozen_size: int = 65536  # its tokens' size, to fill the socket buffers ...
    frozen_tokens: int = 300  # ... many times over (19 MiB; loopback buffers hold ~4 MiB)
    patience: float = 120.0  # one client's whole exchange, generously


#: The mix sized for the real vLLM tiny model on a loaded 2-core machine: the engine paces the
#: tokens (no server-side delay), and the frozen readers get 256 KiB tokens so that they fill
#: the socket buffers in a few engine steps, before they start to drain.
VLLM_SPEC = LoadSpec(streams=16, duration=45.0, tokens=40, delay=0.0, freeze=10.0,
                     frozen_size=2**18)


@dataclass
class Tally:
    """Outcomes per client kind; ``bad`` keeps the first few unexpected ones in words."""

    outcomes: Counter[str] = field(default_factory=Counter)
    bad: list[str] = field(default_factory=list)
    frozen: int = 0

    def add(self, kind: str, outcome: str) -> None:
        self.outcomes[f"{kind}:{outcome.split(':')[0]}"] += 1
        if outcome.split(":")[0] not in GOOD and len(self.bad) < 20:
            self.bad.append(f"{kind}: {outcome}")

    @property
    def total(self) -> int:
        return sum(self.outcomes.values())

    @property
    def failures(self) -> int:
        return sum(n for key, n in self.outcomes.items() if key.split(":")[1] not in GOOD)

    def count(self, outcome: str) -> int:
        return sum(n for key, n in self.outcomes.items() if key.split(":")[1] == outcome)


def _query(spec: LoadSpec, **extra: object) -> str:
    params = {"n": spec.tokens, "delay": spec.delay, **extra}
    return "&".join(f"{k}={v}" for k, v in params.items())


async def _sse(port: int, kind: str, spec: LoadSpec, rng: random.Random) -> str:
    path = "/soak/sse-poll" if kind in ("poll", "reset-poll") else "/soak/sse"
    fail_at = rng.randrange(1, spec.tokens) if kind == "raise-sse" else None
    query = _query(spec, **({"fail_at": fail_at} if fail_at is not None else {}))
    client = SSEStream(port, f"{path}?{query}")
    try:
        if (status := await client.open()) != 200:
            return f"status:{status}"
        if kind.startswith("reset"):
            got = rng.randrange(1, spec.tokens)
            result = await client.read(got)
            client.reset()
            return "reset" if len(result.events) >= got else f"short:{result.names}"
        result = await client.read(pause=spec.slow_pause if kind == "slow-sse" else 0.0)
        want = ["message"] * (spec.tokens if fail_at is None else fail_at)
        want.append("done" if fail_at is None else "error")
        return "ok" if result.names == want and result.complete else f"wrong:{result.names}"
    finally:
        await client.close()


async def _ws(port: int, kind: str, spec: LoadSpec, rng: random.Random) -> str:
    client = WSChat(port, "/ws/soak")
    fail_at = rng.randrange(1, spec.tokens) if kind == "raise-ws" else None
    try:
        if (status := await client.open()) != 101:
            return f"status:{status}"
        prompt = {"prompt": "soak", "n": spec.tokens, "delay": spec.delay, "fail_at": fail_at}
        if kind == "reset-ws":
            await client.send_json(prompt)
            got = rng.randrange(1, spec.tokens)
            seen = [await client.frame() for _ in range(got)]
            client.reset()
            return "reset" if None not in seen else f"short:{seen}"
        frames = await client.turn(prompt, pause=spec.slow_pause if kind == "slow-ws" else 0)
        types = [f.get("type") for f in frames]
        want = ["token"] * (spec.tokens if fail_at is None else fail_at)
        want.append("done" if fail_at is None else "error")
        return "ok" if types == want else f"wrong:{types}:{client.close_code}"
    finally:
        await client.close()


async def _frozen(port: int, spec: LoadSpec, rng: random.Random) -> str:
    """Never read for ``freeze`` seconds, then drain: the guard must have cut the stream."""
    query = f"n={spec.frozen_tokens}&size={spec.frozen_size}"
    if rng.random() < 0.5:
        sse = SSEStream(port, f"/soak/sse?{query}", rcvbuf=4096)
        try:
            if (status := await sse.open()) != 200:
                return f"status:{status}"
            await asyncio.sleep(spec.freeze)
            result = await sse.read()
            return "cut" if "done" not in result.names else "survived"
        finally:
            await sse.close()
    ws = WSChat(port, "/ws/soak", rcvbuf=4096)
    try:
        if (status := await ws.open()) != 101:
            return f"status:{status}"
        await ws.send_json({"prompt": "frozen", "n": spec.frozen_tokens,
                            "size": spec.frozen_size})
        await asyncio.sleep(spec.freeze)
        frames = 0
        while (frame := await ws.frame()) is not None:
            if frame.get("type") == "done":
                return "survived"
            frames += 1
        return "cut"
    finally:
        ws.reset()


async def one_client(port: int, kind: str, spec: LoadSpec, rng: random.Random) -> str:
    """Run one client of ``kind``; its outcome (see :data:`GOOD`)."""
    try:
        async with asyncio.timeout(spec.patience):
            if kind == "frozen":
                return await _frozen(port, spec, rng)
            if kind.endswith("-ws"):
                return await _ws(port, kind, spec, rng)
            return await _sse(port, kind, spec, rng)
    except TimeoutError:
        return "timeout"
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        return f"error:{type(exc).__name__}: {exc}"


async def run_load(port: int, spec: LoadSpec, *,
                   sample: Callable[[float], Awaitable[None]] | None = None,
                   sample_every: float = 5.0, seed: int = 13) -> Tally:
    """Drive the mix against ``127.0.0.1:port``; ``sample(elapsed)`` every ``sample_every`` s."""
    tally = Tally()
    deadline = time.monotonic() + spec.duration
    start = time.monotonic()

    async def worker(i: int) -> None:
        rng = random.Random(seed * 100_003 + i)
        step = i
        while time.monotonic() < deadline:
            kind = MIX[step % len(MIX)]
            step += 1
            tally.add(kind, await one_client(port, kind, spec, rng))

    async def sampler() -> None:
        assert sample is not None
        while True:
            await sample(time.monotonic() - start)
            await asyncio.sleep(sample_every)

    probe = asyncio.create_task(sampler()) if sample is not None else None
    try:
        await asyncio.gather(*(worker(i) for i in range(spec.streams)))
    finally:
        if probe is not None:
            probe.cancel()
    return tally
