"""The demo app (``examples.fastapi_app``) with the quota extension enabled.

``uvicorn tests.quota.apps.demo_app:app``. The demo does not know token counts, so this wrapper
plays "whoever knows them": it reports each ``/chat`` prompt's length in words as its context
length. ``LLM_GUARD_TEST_QUOTA_WINDOW`` sets the window (seconds, default 1).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs

from examples.fastapi_app import app as demo
from llm_guard_sdk.quota import QuotaRecorder, QuotaSettings

window = float(os.environ.get("LLM_GUARD_TEST_QUOTA_WINDOW", "1"))
recorder = demo.state.guard.add_extension(QuotaRecorder(QuotaSettings(window=window)))


async def app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] == "/chat":
        query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
        recorder.observe_request(len(query.get("prompt", [""])[0].split()))
    await demo(scope, receive, send)
