"""A FastAPI app guarded with the quota extension, seeded from ``LLM_GUARD_TEST_QUOTA_FILE``.

``uvicorn tests.quota.apps.seeded_app:app``: the guard reads ``LLM_GUARD_*`` (a status token,
say); the recorder loads the file at start-up, so ``GET /llm-guard/quota`` serves known data.
"""

from __future__ import annotations

import os

from fastapi import FastAPI

from llm_guard_sdk.adapters.fastapi import install
from llm_guard_sdk.quota import QuotaRecorder, QuotaSettings

app = FastAPI()
guard = install(app)
guard.add_extension(QuotaRecorder(QuotaSettings(file=os.environ["LLM_GUARD_TEST_QUOTA_FILE"])))


@app.get("/")
async def root() -> dict[str, str]:
    return {"ok": "yes"}
