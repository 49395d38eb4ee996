"""A stand-in model server: OpenAI's streaming ``POST /v1/completions`` over the simulator.

``uvicorn tests.proof.apps.engine_app:app``. The fault tests run it as its own process in
front of which the demo app (``LLM_GUARD_DEMO_BACKEND=remote``) streams, then SIGKILL it
as the OOM killer would kill a model server, and start it again on the same port.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from llm_guard_sdk.testing.simulator import SimulatedLLM

app = FastAPI()
llm = SimulatedLLM(rate=40)


@app.get("/health")
async def health() -> dict[str, bool]:
    return {"ok": True}


@app.post("/v1/completions")
async def completions(request: Request) -> StreamingResponse:
    body: dict[str, Any] = await request.json()

    async def chunks() -> AsyncIterator[str]:
        async for text in llm.generate(str(body.get("prompt", "")),
                                        int(body.get("max_tokens") or 16)):
            yield f"data: {json.dumps({'choices': [{'index': 0, 'text': text}]})}\n\n"
        done = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
        yield f"data: {json.dumps(done)}\n\ndata: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")
