"""What every ``llm-guard`` subcommand shares: exit codes, the one-line error, HTTP GET of JSON.

Apart from :mod:`llm_guard_sdk.cli` so that subcommands kept in their own packages (``plan`` in
:mod:`llm_guard_sdk.quota.cli`) can use them without importing the command that registers them.
Standard library only, so the command works wherever the core package is installed.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
TOKEN_ENV = "LLM_GUARD_STATUS_TOKEN"

EXIT_OK = 0
EXIT_SERVER_ERROR = 1
EXIT_USAGE = 2
EXIT_SHEDDING = 3
EXIT_INTERRUPTED = 130

#: What each exit status means; printed at the end of ``--help``.
EXIT_CODES = {
    EXIT_OK: "ok",
    EXIT_SERVER_ERROR: "the server answered with an error (e.g. HTTP 401, 403, 404)",
    EXIT_USAGE: "usage error, unreadable input or too little data, or the server could not "
                "be reached",
    EXIT_SHEDDING: "status: the guard's level is shed (it refuses new work)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


class CommandError(Exception):
    """A failure worth one line on stderr, with the exit code to use.

    ``http_status`` is the server's HTTP status when it answered with an error (so a command
    can give a hint for a 401), else None.
    """

    def __init__(self, message: str, code: int = EXIT_USAGE, *,
                 http_status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = http_status


def fetch_json(url: str, token: str | None, *, timeout: float = 10.0,
               busy_wait: float = 0.0) -> Any:
    """GET ``url`` with an optional bearer token and decode the JSON body.

    A 429 with ``Retry-After`` (the snapshot route is busy or rate-limited) is retried after
    that many seconds while ``busy_wait`` seconds have not passed.
    """
    try:
        request = urllib.request.Request(url, headers={"accept": "application/json"})
    except ValueError as exc:
        raise CommandError(f"{url}: invalid URL ({exc})") from None
    if token:
        request.add_header("authorization", f"Bearer {token}")
    deadline = time.monotonic() + busy_wait
    while True:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body: bytes = response.read()
            break
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:200]
            pause = _retry_after(exc) if exc.code == 429 else None
            if pause is None or time.monotonic() + pause > deadline:
                raise CommandError(f"{url}: HTTP {exc.code} {detail}", code=EXIT_SERVER_ERROR,
                                   http_status=exc.code) from None
            print(f"server busy; retrying in {pause:g} s", file=sys.stderr)
            time.sleep(pause)
        except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: bad URL
            raise CommandError(f"{url}: {exc}") from None
    try:
        return json.loads(body.decode())
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise CommandError(f"{url}: the answer is not JSON ({exc})") from None


def _retry_after(error: urllib.error.HTTPError) -> float | None:
    text = (error.headers.get("retry-after") or "").strip()
    return float(text) if text.isdigit() else None


def endpoint(base: str, prefix: str, path: str) -> str:
    """Join the server URL, the guard's route prefix and an endpoint path."""
    return base.rstrip("/") + prefix + path
