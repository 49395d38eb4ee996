"""``llm-guard``: talk to a running guard from a terminal.

Uses only the standard library (urllib) so it works wherever the core package is installed.
Subcommands: ``status`` (one look at the status document), ``snapshot`` (two heap snapshots
``--interval`` seconds apart, printed as a diff table; needs the leak tools enabled on the
server, ``LLM_GUARD_LEAKS=1``), ``plan`` (memory and capacity from the quota model, see
:mod:`llm_guard_sdk.quota.cli`), ``doctor`` and ``config`` (:mod:`llm_guard_sdk.doctor`).
The bearer token comes from ``--token`` or, so that no secret has to be on the command line,
from ``LLM_GUARD_STATUS_TOKEN`` (the variable the server reads).
Exit codes are in :data:`EXIT_CODES`; ``status`` exits 3 while the guard sheds load, so a probe
or a script can act on it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from llm_guard_sdk import __version__
from llm_guard_sdk.cli_common import (
    DEFAULT_URL,
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_SERVER_ERROR,
    EXIT_SHEDDING,
    EXIT_USAGE,
    TOKEN_ENV,
    CommandError,
    endpoint,
    fetch_json,
)
from llm_guard_sdk.doctor import add_config_command, add_doctor_command
from llm_guard_sdk.quota.cli import add_plan_command

__all__ = [
    "EXIT_CODES",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SERVER_ERROR",
    "EXIT_SHEDDING",
    "EXIT_USAGE",
    "CommandError",
    "build_parser",
    "fetch_json",
    "format_diff",
    "format_status",
    "main",
]


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
    # None until main() fills in DEFAULT_URL, so ``config`` can tell "no --url" (local) apart.
    parser.add_argument("--url", default=None, help=f"server base URL ({DEFAULT_URL})")
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
    add_plan_command(sub, common, epilog)
    add_doctor_command(sub, common)
    add_config_command(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``llm-guard`` console script."""
    args = build_parser().parse_args(argv)
    args.url_given = args.url is not None
    args.url = args.url or DEFAULT_URL
    if args.token is None:
        args.token = os.environ.get(TOKEN_ENV) or None
    try:
        code: int = args.func(args)
    except CommandError as exc:
        print(f"llm-guard: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # Piped into ``head``: the reader has what it wanted. Point stdout at devnull so the
        # interpreter's final flush does not fail again (the Python docs' recipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    return code


if __name__ == "__main__":
    sys.exit(main())
