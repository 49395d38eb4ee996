"""``llm-guard plan``: predicted memory and how many sessions fit, from recorded observations.

::

    llm-guard plan --qps 200 --context 8192                      # GET <url>/llm-guard/quota
    llm-guard plan --qps 200 --context 8192 --from observations.json
    llm-guard plan --qps 200 --context 8192 --from obs.json --limit 16GiB --duration 30

The observations are refitted here (the document's own fit is informative only). The memory
limit, the evict threshold and the mean session duration come from the document (the recorder
writes the guard's) unless ``--limit``, ``--evict-at`` or ``--duration`` say otherwise.
Unreadable input, an unreachable server and too little data exit 2 with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from llm_guard_sdk.cli_common import EXIT_OK, EXIT_SERVER_ERROR, CommandError, endpoint, fetch_json
from llm_guard_sdk.config import GuardConfig
from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.quota.model import Capacity, QuotaFit, QuotaFitError, fit
from llm_guard_sdk.quota.store import QuotaDocument, read_document
from llm_guard_sdk.settings import parse_size


def _number(text: str, *, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise argparse.ArgumentTypeError(
            f"expected a number {'> 0' if positive else '>= 0'}, got {text!r}")
    return value


def _rate(text: str) -> float:
    return _number(text, positive=False)


def _positive(text: str) -> float:
    return _number(text, positive=True)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fraction(text: str) -> float:
    value = _positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], got {text!r}")
    return value


def add_plan_command(sub: Any, common: argparse.ArgumentParser, epilog: str) -> None:
    """Register ``plan`` on the ``llm-guard`` subparsers (``common``: --url/--token/--prefix)."""
    plan = sub.add_parser(
        "plan", parents=[common], epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="predicted memory and sessions that fit, from the quota model's observations",
        description="Fit M = alpha*QPS*L + beta*sqrt(L) + gamma to recorded observations and "
                    "print the memory predicted at --qps/--context and how many concurrent "
                    "sessions fit under the evict threshold.")
    plan.add_argument("--qps", type=_rate, required=True, help="new sessions per second")
    plan.add_argument("--context", type=_positive, required=True,
                      help="mean context length, tokens")
    plan.add_argument("--from", dest="source", metavar="FILE", default=None,
                      help="a saved quota document (default: GET <url><prefix>/quota)")
    plan.add_argument("--limit", type=_size, default=None,
                      help="memory limit, e.g. 16GiB (default: the one in the data)")
    plan.add_argument("--evict-at", type=_fraction, default=None,
                      help="evict threshold, a fraction of the limit (default: from the data)")
    plan.add_argument("--duration", type=_positive, default=None,
                      help="mean session duration, seconds (default: measured)")
    plan.add_argument("--json", action="store_true", help="print JSON")
    plan.set_defaults(func=cmd_plan)


def load_document(args: argparse.Namespace) -> tuple[QuotaDocument, str]:
    """The document ``--from`` names, else the server's; with where it came from."""
    if args.source is not None:
        try:
            return read_document(args.source), args.source
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
    url = endpoint(args.url, args.prefix, "/quota")
    raw = fetch_json(url, args.token)
    try:
        return QuotaDocument.from_dict(raw), url
    except ValueError as exc:
        raise CommandError(f"{url}: unexpected answer (not a quota document: {exc})",
                           code=EXIT_SERVER_ERROR) from None


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """Everything ``plan`` prints, as JSON-safe data."""
    document, where = load_document(args)
    try:
        model = fit(document.observations, target=document.target)
    except QuotaFitError as exc:
        raise CommandError(f"{where}: {exc}") from None
    limit = args.limit or document.limit_bytes
    evict_at = args.evict_at or document.evict_at or GuardConfig().evict_at
    duration = args.duration or document.mean_session_seconds or None
    capacity: Capacity | None = None
    if limit is not None and duration is not None:
        capacity = model.capacity(limit, evict_at, context_tokens=args.context,
                                  session_seconds=duration)
    return {
        "source": where,
        "qps": args.qps,
        "context_tokens": args.context,
        "predicted_bytes": model.predict(args.qps, args.context),
        "fit": model.to_dict(),
        "limit_bytes": limit,
        "evict_at": evict_at,
        "session_seconds": duration,
        "capacity": capacity.to_dict() if capacity is not None else None,
    }


def _size_text(value: float) -> str:
    sign, value = ("-" if value < 0 else ""), abs(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{sign}{value:.1f} {unit}" if unit != "B" else f"{sign}{value:.0f} B"
        value /= 1024
    return f"{sign}{value:.2f} TiB"


def format_plan(result: dict[str, Any]) -> str:
    """The human summary of :func:`plan`."""
    model = QuotaFit(**result["fit"])
    qps, context = result["qps"], result["context_tokens"]
    lines = [
        f"model      M = alpha*QPS*L + beta*sqrt(L) + gamma  (M: {model.target} memory, "
        f"fitted on {model.n} windows from {result['source']})",
        f"           alpha {model.alpha:.4g} B/(req/s*token)  beta {model.beta:.4g} "
        f"B/sqrt(token)  gamma {_size_text(model.gamma)}",
        f"fit        R^2 {model.r_squared:.3f}  residual std error "
        f"{_size_text(model.residual_std_error)}",
        f"predicted  {_size_text(result['predicted_bytes'])} at {qps:g} req/s with "
        f"{context:g} context tokens",
    ]
    limit, capacity = result["limit_bytes"], result["capacity"]
    if limit is None:
        lines.append("capacity   unknown: the data has no memory limit; pass --limit")
        return "\n".join(lines)
    budget = result["evict_at"] * limit
    lines.append(f"limit      {_size_text(limit)}, evict at {result['evict_at']:g} -> budget "
                 f"{_size_text(budget)} ({result['predicted_bytes'] / budget:.0%} used at "
                 f"{qps:g} req/s)")
    if capacity is None:
        lines.append("capacity   unknown: no session has been seen to close; pass --duration")
    elif capacity["sessions"] is None:
        lines.append("capacity   unbounded by the model: memory does not grow with load "
                     "(alpha <= 0)")
    else:
        lines.append(f"capacity   {capacity['sessions']:,} concurrent sessions at {context:g} "
                     f"tokens (up to {capacity['max_qps']:.4g} req/s, each session "
                     f"{_size_text(capacity['per_session_bytes'])}, mean duration "
                     f"{result['session_seconds']:.3g} s)")
    return "\n".join(lines)


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the plan (``--json`` for the data)."""
    result = plan(args)
    print(json.dumps(result, indent=2) if args.json else format_plan(result))
    return EXIT_OK
