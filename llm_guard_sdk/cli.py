"""``llm-guard``: talk to a running guard from a terminal.

Uses only the standard library (urllib) so it works wherever the core package is installed.
Subcommands: ``status`` (one look at the status document) and ``snapshot`` (two heap snapshots
``--interval`` seconds apart, printed as a diff table; needs the leak tools enabled on the
server, ``LLM_GUARD_LEAKS=1``). The bearer token comes from ``--token`` or, so that no secret
has to be on the command line, from ``LLM_GUARD_STATUS_TOKEN`` (the variable the server reads).
Exit codes are in :data:`EXIT_CODES`; ``status`` exits 3 while the guard sheds load, so a probe
or a script can act on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from llm_guard_sdk import __version__

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
    EXIT_USAGE: "usage error, or the server could not be reached",
    EXIT_SHEDDING: "status: the guard's level is shed (it refuses new work)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


class CommandError(Exception):
    """A failure worth one line on stderr, with the exit code to use."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def fetch_json(url: str, token: str | None, *, timeout: float = 10.0,
               busy_wait: float = 0.0) -> Any:
    """GET ``url`` with an optional bearer token and decode the JSON body.

    A 429 with ``Retry-After`` (the snapshot route is busy or rate-limited) is retried after
    that many seconds while ``busy_wait`` seconds have not passed.
    """
    request = urllib.request.Request(url, headers={"accept": "application/json"})
    if token:
        request.add_header("authorization", f"Bearer {token}")
    deadline = time.monotonic() + busy_wait
    while True:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read().decode())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:200]
            pause = _retry_after(exc) if exc.code == 429 else None
            if pause is None or time.monotonic() + pause > deadline:
                raise CommandError(f"{url}: HTTP {exc.code} {detail}",
                                   code=EXIT_SERVER_ERROR) from None
            print(f"server busy; retrying in {pause:g} s", file=sys.stderr)
            time.sleep(pause)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise CommandError(f"{url}: {exc}") from None


def _retry_after(error: urllib.error.HTTPError) -> float | None:
    text = (error.headers.get("retry-after") or "").strip()
    return float(text) if text.isdigit() else None


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
    """Print the status document (``--json``) or its summary; exit 3 while shedding."""
    url = endpoint(args.url, args.prefix, "/status")
    doc = fetch_json(url, args.token)
    if not isinstance(doc, dict):
        raise CommandError(f"{url}: unexpected answer (not a status document)",
                           code=EXIT_SERVER_ERROR)
    print(json.dumps(doc, indent=2) if args.json else format_status(doc))
    return EXIT_SHEDDING if doc.get("level") == "shed" else EXIT_OK


def _signed(value: float, unit: str = "") -> str:
    return f"{value:+,.1f}{unit}" if unit else f"{int(value):+,}"


def format_diff(doc: dict[str, Any]) -> str:
    """The snapshot diff as tables: totals, type growth, tracemalloc lines."""
    mib = 2**20
    rss = doc.get("rss_bytes", {})
    objects = doc.get("objects", {})
    sessions = doc.get("sessions", {})
    delta = sessions.get("delta", {})
    before, after = sessions.get("before", {}), sessions.get("after", {})
    lines = [
        f"snapshot {doc.get('base')} -> {doc.get('id')} after {doc.get('elapsed_seconds')} s",
        f"rss        {_signed(rss.get('delta', 0) / mib, ' MiB')}  "
        f"({rss.get('before', 0) / mib:.1f} -> {rss.get('after', 0) / mib:.1f} MiB)",
        f"sessions   open {_signed(delta.get('open', 0))} ({before.get('open')} -> "
        f"{after.get('open')})  opened {_signed(delta.get('opened_total', 0))}  "
        f"closed {_signed(delta.get('closed_total', 0))}",
        f"objects    {_signed(objects.get('delta', 0))} ({objects.get('before', 0):,} -> "
        f"{objects.get('after', 0):,})",
        "",
        f"{'type':<48} {'before':>10} {'after':>10} {'delta':>9} {'bytes delta':>12}",
    ]
    for row in doc.get("types", []):
        lines.append(f"{str(row.get('type'))[:48]:<48} {row.get('before', 0):>10,} "
                     f"{row.get('after', 0):>10,} {_signed(row.get('delta', 0)):>9} "
                     f"{_signed(row.get('bytes_delta', 0)):>12}")
    if not doc.get("types"):
        lines.append("(no type changed)")
    trace = doc.get("tracemalloc")
    lines.append("")
    if trace:
        lines.append(f"{'size delta':>12} {'count delta':>12}  where (tracemalloc)")
        for row in trace:
            lines.append(f"{_signed(row.get('size_delta_bytes', 0)):>12} "
                         f"{_signed(row.get('count_delta', 0)):>12}  {row.get('where')}")
    else:
        lines.append(str(doc.get("tracemalloc_note", "tracemalloc: not tracing")))
    return "\n".join(lines)


def cmd_snapshot(args: argparse.Namespace) -> int:
    """Take a snapshot, wait ``--interval`` seconds, take another and print the diff."""
    url = endpoint(args.url, args.prefix, "/snapshot")
    first = fetch_json(url, args.token, timeout=args.timeout, busy_wait=args.timeout)
    base = first.get("id") if isinstance(first, dict) else None
    if not isinstance(base, int):
        raise CommandError(f"{url}: unexpected answer (no snapshot id)", code=EXIT_SERVER_ERROR)
    if args.interval > 0:
        print(f"snapshot {base} taken; the next in {args.interval:g} s", file=sys.stderr)
        time.sleep(args.interval)
    doc = fetch_json(f"{url}?diff={base}&limit={args.limit}", args.token, timeout=args.timeout,
                     busy_wait=args.timeout)
    print(json.dumps(doc, indent=2) if args.json else format_diff(doc))
    return EXIT_OK


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def _positive(text: str) -> float:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected seconds > 0")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 500:
        raise argparse.ArgumentTypeError(f"expected an integer from 1 to 500, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; subcommands register themselves here.

    ``--url``, ``--token`` and ``--prefix`` are accepted before or after the subcommand.
    """
    epilog = "exit codes:\n" + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_CODES.items())
    parser = argparse.ArgumentParser(prog="llm-guard", description=__doc__.splitlines()[0],
                                     epilog=epilog,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"server base URL ({DEFAULT_URL})")
    parser.add_argument("--token", default=None,
                        help=f"bearer token (default: ${TOKEN_ENV}, as the server reads it)")
    parser.add_argument("--prefix", default="/llm-guard", help="guard route prefix")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help="server base URL")
    common.add_argument("--token", default=argparse.SUPPRESS, help="bearer token")
    common.add_argument("--prefix", default=argparse.SUPPRESS, help="guard route prefix")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", parents=[common], epilog=epilog,
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            help="show the guard's status (exit 3 while it sheds)")
    status.add_argument("--json", action="store_true", help="print the raw JSON")
    status.set_defaults(func=cmd_status)
    snap = sub.add_parser("snapshot", parents=[common],
                          help="diff two heap snapshots taken --interval seconds apart")
    snap.add_argument("--interval", type=_non_negative, default=30.0,
                      help="seconds between the two snapshots (30)")
    snap.add_argument("--limit", type=_positive_int, default=25, help="rows per table (25)")
    snap.add_argument("--timeout", type=_positive, default=120.0,
                      help="seconds to wait for each snapshot (120; a heap walk is slow)")
    snap.add_argument("--json", action="store_true", help="print the raw JSON diff")
    snap.set_defaults(func=cmd_snapshot)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llm-guard`` console script."""
    args = build_parser().parse_args(argv)
    if args.token is None:
        args.token = os.environ.get(TOKEN_ENV) or None
    try:
        code: int = args.func(args)
    except CommandError as exc:
        print(f"llm-guard: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return code


if __name__ == "__main__":
    sys.exit(main())
