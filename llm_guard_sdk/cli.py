"""``llm-guard``: talk to a running guard from a terminal.

Uses only the standard library (urllib) so it works wherever the core package is installed.
Subcommands: ``status`` (one look at the status document). Exit codes: 0 ok, 1 the server
answered with an error, 2 usage or connection error.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"


class CommandError(Exception):
    """A failure worth one line on stderr, with the exit code to use."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def fetch_json(url: str, token: str | None, *, timeout: float = 10.0) -> Any:
    """GET ``url`` with an optional bearer token and decode the JSON body."""
    request = urllib.request.Request(url, headers={"accept": "application/json"})
    if token:
        request.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:200]
        raise CommandError(f"{url}: HTTP {exc.code} {detail}", code=1) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CommandError(f"{url}: {exc}") from None


def endpoint(base: str, prefix: str, path: str) -> str:
    """Join the server URL, the guard's route prefix and an endpoint path."""
    return base.rstrip("/") + prefix + path


def format_status(doc: dict[str, Any]) -> str:
    """A short human summary of the status document."""
    memory = doc.get("memory", {})
    sessions = doc.get("sessions", {})
    streams = doc.get("streams", {})
    lines = [
        f"level      {doc.get('level')}  (pressure {memory.get('used_ratio')} "
        f"from {memory.get('source') or '-'})",
        f"memory     rss {memory.get('rss_bytes', 0) / 2**20:.1f} MiB of limit "
        f"{(memory.get('limit_bytes') or 0) / 2**20:.1f} MiB",
        f"sessions   active {sessions.get('active')}  idle {sessions.get('idle')}  "
        f"evicted {sessions.get('evicted_total')}  shed {sessions.get('shed_total')}",
        f"streams    open {streams.get('open')}  completed {streams.get('completed_total')}  "
        f"disconnected {streams.get('disconnected_total')}  aborted {streams.get('aborted_total')}",
    ]
    if "vllm" in doc:
        v = doc["vllm"]
        lines.append(f"vllm       running {v.get('running')}  waiting {v.get('waiting')}  "
                     f"kv {v.get('kv_cache_usage')}  aborted {v.get('aborted_total')}")
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    """Print the status document (``--json``) or its summary."""
    doc = fetch_json(endpoint(args.url, args.prefix, "/status"), args.token)
    print(json.dumps(doc, indent=2) if args.json else format_status(doc))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; subcommands register themselves here."""
    parser = argparse.ArgumentParser(prog="llm-guard", description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_URL, help=f"server base URL ({DEFAULT_URL})")
    parser.add_argument("--token", default=None, help="bearer token (LLM_GUARD_STATUS_TOKEN)")
    parser.add_argument("--prefix", default="/llm-guard", help="guard route prefix")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", help="show the guard's status")
    status.add_argument("--json", action="store_true", help="print the raw JSON")
    status.set_defaults(func=cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llm-guard`` console script."""
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except CommandError as exc:
        print(f"llm-guard: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
