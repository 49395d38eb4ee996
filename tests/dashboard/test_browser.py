"""The dashboard in a real headless Chromium against a real uvicorn server.

Debian's ``chromium`` driven by Playwright (``make system-deps`` installs it). The test logs in
with the token (the cookie flow), survives a dropped and a refused feed, watches the chart
draw, the sessions table fill when streaming load starts, an eviction and a shed, checks that
hostile client values render as text, and saves a screenshot under ``$LLM_GUARD_ARTIFACTS``
(default: the test's tmp path; the path is printed). Every wait is on a DOM state, with
generous timeouts: nothing here depends on the machine's speed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import uvicorn_server

CHROMIUM = Path("/usr/bin/chromium")
TOKEN = "browser-token-42"
HOSTILE_TENANT = "<img/src=x/onerror=window.__pwned=1>"
HOSTILE_REQUEST_ID = "<script>window.__pwned=2</script>"
WAIT_MS = 90_000
ENV = {
    "LLM_GUARD_STATUS_TOKEN": TOKEN,
    "LLM_GUARD_TENANT_HEADER": "x-tenant-id",
    "LLM_GUARD_SAMPLE_INTERVAL": "1",  # one eviction every other second: rows stay a while
    "LLM_GUARD_MIN_SESSION_AGE": "0",
    "LLM_GUARD_TRIM_HEAP": "0",
    "LLM_GUARD_LEAKS": "0",
}


@pytest.fixture
def sync_playwright() -> Any:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed: pip install -e '.[dev]'")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: run `make system-deps` (Debian package chromium)")
    return sync_playwright


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("LLM_GUARD_ARTIFACTS") or tmp_path) / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class Load:
    """Streaming clients in threads; each holds one ``/test/stream`` open until stopped."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def open(self, held: int, headers: dict[str, str] | None = None) -> None:
        thread = threading.Thread(target=self._hold, args=(held, headers or {}), daemon=True)
        thread.start()
        self.threads.append(thread)

    def _hold(self, held: int, headers: dict[str, str]) -> None:
        url = f"{self.base}/test/stream?held={held}"
        try:
            with httpx.stream("GET", url, headers=headers, timeout=120, trust_env=False) as r:
                for _ in r.iter_raw():
                    if self.stop.is_set():
                        return
        except httpx.HTTPError:
            return  # evicted: the guard ended the response

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


@pytest.fixture
def server() -> Iterator[str]:
    with uvicorn_server("tests.dashboard.app:app", ENV, ready_path="/llm-guard/live") as base:
        yield base


def set_pressure(base: str, used: int) -> str:
    response = httpx.post(f"{base}/test/pressure?used={used}", trust_env=False, timeout=30)
    response.raise_for_status()
    return str(response.json()["level"])


def number(page: Any, selector: str) -> int:
    return int(page.locator(selector).inner_text().replace(",", ""))


def test_the_dashboard_shows_load_an_eviction_and_a_shed(
        sync_playwright: Any, server: str, artifacts: Path) -> None:
    base = server
    load = Load(base)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                    args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("console", lambda message: problems.append(message.text)
                    if message.type == "error"  # the refused feed below is expected
                    and not message.location.get("url", "").endswith("/dashboard/feed")
                    else None)
            feed_calls: list[str] = []

            def flaky_feed(route: Any) -> None:
                """First connection drops after one ping; the next is refused (503)."""
                feed_calls.append(route.request.url)
                if len(feed_calls) == 1:
                    route.fulfill(status=200, content_type="text/event-stream",
                                  body="retry: 200\n\nevent: ping\ndata: {}\n\n")
                elif len(feed_calls) == 2:
                    route.fulfill(status=503, content_type="application/json", body="{}")
                else:
                    route.continue_()

            page.route("**/llm-guard/dashboard/feed", flaky_feed)

            # Log in: the token is checked, set as a cookie, and gone from the address bar.
            page.goto(f"{base}/llm-guard/dashboard?token={TOKEN}")
            assert page.url == f"{base}/llm-guard/dashboard"
            cookies = page.context.cookies()
            assert [(c["name"], c["httpOnly"], c["sameSite"], c["path"]) for c in cookies] == [
                ("llm_guard_auth", True, "Strict", "/llm-guard")]

            # The feed came back after the drop and the refusal, and the chart draws.
            page.wait_for_function("() => Number(document.body.dataset.snapshots) >= 1",
                                   timeout=WAIT_MS)
            assert len(feed_calls) >= 3
            page.locator("#connection[data-state='live']").wait_for(timeout=WAIT_MS)
            page.wait_for_function(
                "() => Number(document.getElementById('chart').dataset.points) >= 3",
                timeout=WAIT_MS)
            assert page.locator("#level").get_attribute("data-level") == "normal"
            assert page.locator("#session-rows tr.empty").count() == 1
            assert page.locator("#count-evictions").inner_text() == "0"

            # Streaming load starts: rows appear, the counters move.
            assert set_pressure(base, 300) == "normal"
            for n, held in enumerate((4096, 2048, 1024, 512, 256, 128)):
                load.open(held, {"x-tenant-id": ("acme", "globex")[n % 2],
                                 "x-request-id": f"req-{n:04d}"})
            load.open(32, {"x-tenant-id": HOSTILE_TENANT, "x-request-id": HOSTILE_REQUEST_ID})
            page.wait_for_function(
                "() => document.querySelectorAll('#session-rows tr[data-session]').length >= 7",
                timeout=WAIT_MS)
            page.wait_for_function(
                "() => Number(document.getElementById('sessions-streams').textContent) >= 7",
                timeout=WAIT_MS)
            assert number(page, "#count-opened") >= 7

            # Hostile client values are text: no element was made of them, nothing ran.
            hostile = page.locator("#session-rows tr", has_text=HOSTILE_TENANT)
            assert hostile.locator("td.tenant").inner_text() == HOSTILE_TENANT
            assert hostile.locator("td.request").inner_text() == HOSTILE_REQUEST_ID
            assert page.locator("#session-rows img, #session-rows script").count() == 0
            assert page.evaluate("window.__pwned") is None

            # Up through warn to evict: the badge changes and the evictions counter moves.
            points = int(page.locator("#chart").get_attribute("data-points") or 0)
            assert set_pressure(base, 800) == "warn"
            page.locator("#level[data-level='warn']").wait_for(timeout=WAIT_MS)
            page.wait_for_function(
                f"() => Number(document.getElementById('chart').dataset.points) > {points + 1}",
                timeout=WAIT_MS)
            assert set_pressure(base, 880) == "evict"
            page.locator("#level[data-level='evict']").wait_for(timeout=WAIT_MS)
            page.wait_for_function(
                "() => Number(document.getElementById('count-evictions').textContent) >= 1",
                timeout=WAIT_MS)
            assert page.locator("#level").text_content() == "evict"
            shot = artifacts / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"dashboard screenshot: {shot}")

            # Shed: a new request is refused, and the page counts it.
            assert set_pressure(base, 960) == "shed"
            refused = httpx.get(f"{base}/anything", trust_env=False, timeout=30)
            assert refused.status_code == 503
            page.wait_for_function(
                "() => Number(document.getElementById('count-sheds').textContent) >= 1",
                timeout=WAIT_MS)
            page.locator("#level[data-level='shed']").wait_for(timeout=WAIT_MS)
            assert problems == []
        finally:
            browser.close()
            load.close()
