"""The dashboard's routes in process: the page and its CSP, the assets, the live feed through
the middleware, the switch, and the package data a wheel carries."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import zipfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from llm_guard_sdk import Guard, GuardConfig, GuardMiddleware, guard_stream
from llm_guard_sdk.dashboard import CONTENT_SECURITY_POLICY, Dashboard
from tests.support import ROOT, FakeSource, ProtocolSend, client_for, http_scope, sse_events
from tests.support.polling import until

pytestmark = pytest.mark.anyio
STATIC = ROOT / "llm_guard_sdk" / "dashboard" / "static"
SECRET = "TOP-SECRET-PROMPT-TEXT"


def served(**config: Any) -> tuple[Guard, GuardMiddleware]:
    guard = Guard(GuardConfig.defaults(sources=("process",), **config), sources=[FakeSource()])

    async def app(scope: Any, receive: Any, send: Any) -> None:
        """Echoes the request body (a prompt) as a slow guarded stream, until told to stop."""
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break

        async def tokens() -> Any:
            while True:
                yield b"data: " + body + b"\n\n"
                await asyncio.sleep(0.05)

        await send({"type": "http.response.start", "status": 200, "headers": []})
        async for chunk in guard_stream(tokens(), held=lambda: 3000):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

    return guard, GuardMiddleware(app, guard=guard)


class Markup(HTMLParser):
    """Collects the tags and attributes of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.script_text = ""
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.script_text += data.strip()


async def test_the_page_is_self_contained_under_a_strict_policy() -> None:
    _, middleware = served()
    async with client_for(middleware) as client:
        page = await client.get("/llm-guard/dashboard")
    assert page.status_code == 200
    policy = page.headers["content-security-policy"]
    assert policy == CONTENT_SECURITY_POLICY
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == directives["style-src"] == "'self'"
    assert "unsafe" not in policy and "http" not in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    markup = Markup()
    markup.feed(page.text)
    assert markup.script_text == ""  # no inline script
    for tag, attrs in markup.tags:
        assert "style" not in attrs and tag != "style", tag  # no inline style
        assert not any(name.startswith("on") for name in attrs), tag  # no inline handlers
        for name in ("src", "href"):
            value = attrs.get(name)
            if value is not None:  # relative, same origin, under the dashboard route
                assert value.startswith("dashboard/") and "//" not in value, value
    scripts = [attrs["src"] for tag, attrs in markup.tags if tag == "script"]
    assert scripts == ["dashboard/dashboard.js"]


@pytest.mark.parametrize(("path", "content_type"), [
    ("/llm-guard/dashboard/dashboard.js", "text/javascript; charset=utf-8"),
    ("/llm-guard/dashboard/dashboard.css", "text/css; charset=utf-8")])
async def test_assets_are_served_from_the_package(path: str, content_type: str) -> None:
    _, middleware = served()
    async with client_for(middleware) as client:
        asset = await client.get(path)
    assert asset.status_code == 200 and asset.headers["content-type"] == content_type
    assert asset.content == (STATIC / path.rsplit("/", 1)[1]).read_bytes()
    assert asset.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def test_the_script_never_writes_markup_nor_fetches_elsewhere() -> None:
    script = (STATIC / "dashboard.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
                 "new Function", "http://", "https://"):
        assert sink not in script, sink
    assert "textContent" in script
    assert re.findall(r"new EventSource\(([^)]*)\)", script) == ['"dashboard/feed"']


async def test_the_switch_turns_the_dashboard_off() -> None:
    guard, middleware = served(dashboard=False)
    assert guard.extension("dashboard") is None
    async with client_for(middleware) as client:
        missing = await client.get("/llm-guard/dashboard")
    assert missing.status_code == 404


async def test_the_feed_streams_history_then_snapshots_without_any_content() -> None:
    guard, middleware = served()
    dashboard = guard.extension("dashboard")
    assert isinstance(dashboard, Dashboard)
    # A streaming request whose prompt (body) and path must never reach the feed.
    streaming_send = ProtocolSend()
    leave_stream = asyncio.Event()

    async def stream_receive() -> dict[str, Any]:
        if not hasattr(stream_receive, "sent"):
            stream_receive.sent = True  # type: ignore[attr-defined]
            return {"type": "http.request", "body": SECRET.encode(), "more_body": False}
        await leave_stream.wait()
        return {"type": "http.disconnect"}

    streaming = asyncio.create_task(middleware(
        http_scope(f"/chat/{SECRET}", method="POST",
                   headers=[(b"x-request-id", b"req-42")]), stream_receive, streaming_send))
    await until(lambda: SECRET.encode() in streaming_send.body, timeout=30)

    feed_send = ProtocolSend()
    leave_feed = asyncio.Event()

    async def feed_receive() -> dict[str, Any]:
        await leave_feed.wait()
        return {"type": "http.disconnect"}

    feed = asyncio.create_task(middleware(http_scope("/llm-guard/dashboard/feed"),
                                          feed_receive, feed_send))
    await until(lambda: b"event: snapshot" in feed_send.body, timeout=30)
    assert dashboard.feed.listeners == 1
    leave_feed.set()
    await asyncio.wait_for(feed, 30)
    assert dashboard.feed.listeners == 0 and feed_send.violations == []
    start = feed_send.messages[0]
    assert start["status"] == 200
    assert (b"content-type", b"text/event-stream") in start["headers"]
    events = sse_events(feed_send.body.decode(), comments=False)
    assert [name for name, _ in events[:2]] == ["history", "snapshot"]
    history = json.loads(events[0][1])
    assert history["thresholds"] == {"warn": 0.75, "evict": 0.85, "shed": 0.92}
    snapshot = json.loads(events[1][1])
    rows = snapshot["sessions"]["rows"]
    assert [(r["request_id"], r["held"], r["state"]) for r in rows] == [("req-42", 3000, "active")]
    assert snapshot["sessions"]["streams_open"] == 1
    assert SECRET not in feed_send.body.decode()  # neither the prompt nor the path
    leave_stream.set()
    await asyncio.wait_for(streaming, 30)


async def test_a_full_feed_answers_503() -> None:
    guard, middleware = served(dashboard=False)
    dashboard = Dashboard(max_listeners=1)
    guard.add_extension(dashboard)
    taken = dashboard.feed.subscribe([])
    async with client_for(middleware) as client:
        refused = await client.get("/llm-guard/dashboard/feed")
    await taken.aclose()
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert "at most 1 pages" in refused.json()["error"]


def test_a_built_wheel_carries_the_page_and_its_assets(tmp_path: Path) -> None:
    """Built from a copy (an in-tree build would write build/ into the checkout)."""
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("llm_guard_sdk", "adapters"):
        shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    out = tmp_path / "dist"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(source)], capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = out.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for asset in ("index.html", "dashboard.js", "dashboard.css"):
        assert f"llm_guard_sdk/dashboard/static/{asset}" in names
