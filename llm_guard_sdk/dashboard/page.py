"""The page and its assets: files shipped in the package, served with a strict CSP.

Everything the page needs is in ``static/`` (package data): no CDN, no inline script or
style, nothing fetched from another origin. The Content-Security-Policy says so to the
browser, so an injected ``<script>`` or inline handler would not run even if a value ever
reached the DOM as markup (the page renders every value with ``textContent``).
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from types import MappingProxyType
from typing import Any

from llm_guard_sdk.hooks import ControlBody

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = MappingProxyType({
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cross-origin-opener-policy": "same-origin",
})
"""Sent with the page and every asset."""

PAGE_FILE = "index.html"
ASSET_FILES = MappingProxyType({
    # Route suffix -> (file in static/, content type). The page links them relatively
    # ("dashboard/dashboard.js"), so a proxy serving the guard under another path still works.
    "/dashboard/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
})


@cache
def read_static(name: str) -> bytes:
    """The bytes of ``static/<name>``, read once per process."""
    return files("llm_guard_sdk.dashboard.static").joinpath(name).read_bytes()


def page_reply() -> tuple[int, Any, dict[str, str]]:
    """The HTML page, as a control route's reply."""
    body = ControlBody(read_static(PAGE_FILE), "text/html; charset=utf-8")
    return 200, body, dict(SECURITY_HEADERS)


def asset_reply(suffix: str) -> tuple[int, Any, dict[str, str]]:
    """One asset (``suffix`` is a key of :data:`ASSET_FILES`), as a control route's reply."""
    name, content_type = ASSET_FILES[suffix]
    return 200, ControlBody(read_static(name), content_type), dict(SECURITY_HEADERS)
