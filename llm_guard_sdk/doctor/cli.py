"""``llm-guard doctor``: every indicator with OK / WARN / CRIT and a fix; exit 0/1/2 by the worst.

::

    llm-guard doctor --url http://127.0.0.1:8000        # status twice, 1 s apart, and config
    llm-guard doctor --pid 4242                         # from outside: psutil and the cgroup
    llm-guard doctor --json --interval 0                # for cron / CI; rates over the uptime

Exit 0 when every indicator is ok, 1 when the worst is a warning, 2 when one is critical, and
2 as well, with one line on stderr, when the target cannot be reached or is not a guard.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from llm_guard_sdk.doctor.evaluate import report
from llm_guard_sdk.doctor.from_pid import collect_pid
from llm_guard_sdk.doctor.from_url import collect_url
from llm_guard_sdk.doctor.render import render

DOCTOR_EXIT_CODES = {
    0: "every indicator is ok",
    1: "the worst indicator is a warning",
    2: "an indicator is critical, or the target cannot be reached or is not a guard (one "
       "line on stderr; HTTP 401: pass --token or $LLM_GUARD_STATUS_TOKEN)",
    130: "interrupted (Ctrl-C)",
}


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= 600):
        raise argparse.ArgumentTypeError(f"expected seconds from 0 to 600, got {text!r}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a process id (an integer > 0), got {text!r}")
    return value


def add_doctor_command(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``doctor`` on the ``llm-guard`` subparsers (``common``: --url/--token/--prefix)."""
    epilog = "exit codes:\n" + "\n".join(f"  {code:<4} {text}"
                                         for code, text in DOCTOR_EXIT_CODES.items())
    doctor = sub.add_parser(
        "doctor", parents=[common], epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="judge memory, sessions, runtime and load indicators; exit 0/1/2 by the worst",
        description="Collect the guard's indicators (RSS, limit, cgroup, descriptors, threads, "
                    "tasks, sessions, idle share, eviction and shed rates, leaks, gc, vLLM, "
                    "time to first token) and print each with OK/WARN/CRIT and a fix.")
    doctor.add_argument("--pid", type=_pid, default=None,
                        help="examine this process from outside (psutil, its cgroup) instead "
                             "of asking --url")
    doctor.add_argument("--interval", type=_seconds, default=1.0,
                        help="seconds between the two status samples the rates come from "
                             "(1; 0: averages over the guard's uptime)")
    doctor.add_argument("--timeout", type=_seconds, default=10.0,
                        help="seconds to wait for each answer (10)")
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Collect, judge, print; the exit code is the worst verdict's."""
    if args.pid is not None:
        facts = collect_pid(args.pid)
    else:
        facts = collect_url(args.url, args.prefix, args.token, interval=args.interval,
                            timeout=args.timeout or 10.0)
    doc = report(facts)
    render(doc, sys.stdout, as_json=args.json)
    code: int = doc["exit_code"]
    return code
