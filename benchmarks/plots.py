"""Plots of benchmark results (matplotlib PNGs for docs/).

Run from the repository root (the ``bench`` extra installs matplotlib)::

    python -m benchmarks.plots overhead --from /tmp/bench/peers.json  # docs/images/overhead.png

``overhead``: the throughput ratio to the bare app of every variant of
:mod:`benchmarks.peers`, server-bound and client-bound side by side, with the targets drawn,
and the p99 read gap beside it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.peers import LABELS

TARGETS = {"raw": 0.95, "httpx": 0.98}
TITLES = {"raw": "server-bound (raw-socket client)", "httpx": "client-bound (httpx client)"}
SHORT = {"bare": "bare app", "guard": "GuardMiddleware\n+ guard_stream",
         "basehttp": "BaseHTTPMiddleware\n(byte counting)",
         "middleware": "GuardMiddleware\nalone", "otel": "OpenTelemetry\nASGI middleware"}
COLORS = {"bare": "#9e9e9e", "guard": "#2e7d32", "middleware": "#81c784", "basehttp": "#ef6c00",
          "otel": "#1565c0"}


def overhead(result: dict[str, Any], out: Path) -> Path:
    """Bar charts of chunks/s ratio to bare and p99 read gap per variant and client."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(result["clients"])
    fig, axes = plt.subplots(2, len(kinds), figsize=(6 * len(kinds), 7.5), squeeze=False)
    cfg = result["config"]
    for col, kind in enumerate(kinds):
        summary = result["clients"][kind]["summary"]
        names = list(summary)
        labels = [SHORT.get(n, LABELS.get(n, n)) for n in names]
        colors = [COLORS.get(n, "#555555") for n in names]
        ratios = [summary[n]["ratio_to_bare"] for n in names]
        ax = axes[0][col]
        bars = ax.bar(labels, ratios, color=colors)
        ax.axhline(1.0, color="#555555", linewidth=0.8)
        ax.axhline(TARGETS[kind], color="#c62828", linestyle="--", linewidth=1,
                   label=f"target {TARGETS[kind]}")
        for bar, ratio in zip(bars, ratios, strict=True):
            ax.annotate(f"{ratio:.2f}x", (bar.get_x() + bar.get_width() / 2, ratio),
                        ha="center", va="bottom", fontsize=9)
        ax.set_ylim(0, max(1.15, max(ratios) * 1.1))
        ax.set_ylabel("chunks/s relative to bare (median of paired rounds)")
        ax.set_title(TITLES.get(kind, kind))
        ax.legend(loc="upper right", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        gaps = [summary[n]["p99_gap_ms"] for n in names]
        ax = axes[1][col]
        ax.bar(labels, gaps, color=colors)
        ax.set_ylabel("p99 gap between reads, ms")
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle(f"Overhead against peers: Starlette StreamingResponse, {cfg['clients']} clients"
                 f" x {cfg['chunks']} chunks x {cfg['size']} B, {cfg['rounds']} rounds "
                 f"({result['environment']['date_utc']}, load at start "
                 f"{result['environment']['load_average_at_start'][0]:.1f}, hot path "
                 f"{result['environment'].get('hot_path', '?')})", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plots",
                                     description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="plot", required=True)
    over = sub.add_parser("overhead", help="ratios against peers from benchmarks.peers --json")
    over.add_argument("--from", dest="source", type=Path, required=True, metavar="JSON")
    over.add_argument("--out", type=Path, default=Path("docs/images/overhead.png"))
    args = parser.parse_args(argv)
    try:
        result = json.loads(args.source.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read {args.source}: {exc}")
    if "clients" not in result:
        parser.error(f"{args.source} is not a benchmarks.peers result (no 'clients' key)")
    print(overhead(result, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
