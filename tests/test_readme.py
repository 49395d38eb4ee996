"""The README's first code snippet runs as written: served by real uvicorn, streamed by httpx."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.support import ROOT, sse_events, uvicorn_server

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def first_python_block(markdown: str) -> str:
    match = re.search(r"^```python\n(.*?)^```$", markdown, re.MULTILINE | re.DOTALL)
    assert match is not None, "README.md has no ```python block"
    return match.group(1)


async def test_first_snippet_serves_sse_with_a_guard_session(tmp_path: Path) -> None:
    source = first_python_block((ROOT / "README.md").read_text())
    (tmp_path / "readme_app.py").write_text(source)
    # Only the process's own memory decides, so a busy shared host cannot make it shed.
    env = {"LLM_GUARD_SOURCES": "process"}
    with uvicorn_server("readme_app:app", env, extra_args=("--app-dir", str(tmp_path))) as base:
        async with (
            httpx.AsyncClient(timeout=30) as client,
            client.stream("GET", f"{base}/chat", params={"prompt": "hello there"}) as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["x-llm-guard-session"].startswith("sess-")
            body = ""
            async for text in response.aiter_text():
                body += text
    assert body.endswith("\n\n")
    words = ("you", "said:", "hello", "there")
    assert sse_events(body) == [("message", word + " ") for word in words]
