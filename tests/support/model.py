"""A model stand-in for in-process adapter tests: it records every generator it made."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from llm_guard_sdk.errors import BackendUnavailableError, InvalidRequestError


class Model:
    """Yields ``t0``, ``t1``, ...; counts starts and ``finally`` runs to prove each was closed.

    Special prompts: ``reject`` raises InvalidRequestError before the first token, ``wait``
    blocks until ``release`` is set, ``die`` raises BackendUnavailableError at the third token.
    """

    def __init__(self) -> None:
        self.generators: list[Any] = []
        self.started = 0
        self.closed = 0
        self.release = asyncio.Event()

    @property
    def open(self) -> int:
        return self.started - self.closed

    def stream(self, prompt: str, n: int = 3, *, delay: float = 0.0) -> AsyncIterator[str]:
        agen = self._tokens(prompt, n, delay)
        self.generators.append(agen)
        return agen

    async def _tokens(self, prompt: str, n: int, delay: float) -> AsyncIterator[str]:
        self.started += 1
        try:
            if prompt == "reject":
                raise InvalidRequestError("prompt too long for this model")
            if prompt == "wait":
                await self.release.wait()
            for i in range(n):
                if delay:
                    await asyncio.sleep(delay)
                if prompt == "die" and i == 2:
                    raise BackendUnavailableError("the engine is dead; retry later")
                yield f"t{i}"
        finally:
            self.closed += 1
