"""OOM survival, full size: the workload app driven to ~3x its memory cgroup, with and without
the guard, several times per backend, memory sampled over time.

Run from the repository root, as root on a host with a memory cgroup controller::

    python -m benchmarks.oom_survival --json .cache/oom.json       # 1 unguarded + 5 guarded runs
    python -m benchmarks.oom_survival --quick                       # simulator, 1 + 1
    python -m benchmarks.oom_survival --backends simulated,vllm --runs 3 --rate 30  # stress
    python -m benchmarks.oom_survival plot .cache/oom.json docs/images/oom_memory.png

Each run is one ``tests.proof.oom_load.run`` (the same run the CI test makes, in a fresh cgroup;
sizes in ``tests.proof.oom_load.SIZES``): a uvicorn server of ``tests.proof.oom_app`` inside a
cgroup, ``--sessions`` conversations of 8 MiB opened at ``--rate`` per second (10 by
default, as the CI test; at 20 and 30 arrivals outrun eviction: the guard sheds, and may lose).
The cgroup's charge (``memory.usage_in_bytes`` / ``memory.current``) is sampled every
``--sample-every`` seconds from a thread of this process. The report gives, per backend and
mode, the runs, the clients' outcomes (completed, evicted, refused with 503, failed), the
guard's counters, the cgroup's peak and OOM kills; the JSON also holds each guarded run's
``timeline``: the guard's own ticks (seconds, sampled pressure, level, open streams), to line up
with the memory samples. ``plot`` draws every run of each backend:
memory over time, the limit, and the moment of each OOM kill.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.harness import Log
from tests.proof.oom_load import MIB, SIZES, workload
from tests.proof.oom_load import run as run_once

MODES = (("unguarded", False), ("guarded", True))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = harness.new_parser("benchmarks.oom_survival", __doc__ or "")
    parser.add_argument("--backends", help="comma-separated: simulated, vllm (simulated,vllm)")
    parser.add_argument("--runs", type=int, help="guarded runs per backend (5)")
    parser.add_argument("--unguarded-runs", type=int, help="unguarded runs per backend (1)")
    parser.add_argument("--sessions", type=int, help="conversations per run (per backend)")
    parser.add_argument("--rate", type=float,
                        help="new conversations per second (10, as the CI test; 20 and 30 are "
                             "the stress cases of docs/reliability.md)")
    parser.add_argument("--sample-every", type=float, default=0.1,
                        help="seconds between cgroup usage samples (0.1)")
    args = harness.parse(parser, argv,
                         quick={"backends": "simulated", "runs": 1, "unguarded_runs": 1,
                                "rate": 10.0},
                         full={"backends": "simulated,vllm", "runs": 5, "unguarded_runs": 1,
                               "rate": 10.0})
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(args.backends) - set(SIZES))
    if unknown:
        parser.error(f"--backends: unknown {', '.join(unknown)}; expected simulated, vllm")
    if args.runs < 0 or args.unguarded_runs < 0 or args.sample_every <= 0:
        parser.error("--runs and --unguarded-runs must be >= 0, --sample-every > 0")
    return args


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    """Every run of every backend; each run's summary and its memory samples."""
    runs: list[dict[str, Any]] = []
    for backend in args.backends:
        for mode, guarded in MODES:
            for i in range(args.runs if guarded else args.unguarded_runs):
                overrides: dict[str, Any] = {}
                if args.sessions is not None:
                    overrides["sessions"] = args.sessions
                overrides["rate"] = args.rate
                work = workload(backend, guarded=guarded, **overrides)
                log(f"{backend} {mode} run {i + 1}: {work.sessions} conversations of "
                    f"{work.context_mib} MiB at {work.rate}/s, limit {work.limit_bytes // MIB} MiB")
                result = run_once(work, sample_every=args.sample_every)
                summary = result.summary()
                log(f"  -> {json.dumps(summary)}")
                runs.append({**summary, "mode": mode, "survived": result.returncode is None,
                             "samples": [(round(t, 3), b) for t, b in result.samples],
                             "timeline": result.timeline})
    return {"runs": runs, "table": table(runs)}


def table(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per backend and mode: totals over its runs, the highest peak."""
    rows: list[dict[str, Any]] = []
    for backend in dict.fromkeys(r["backend"] for r in runs):
        for mode, _ in MODES:
            group = [r for r in runs if r["backend"] == backend and r["mode"] == mode]
            if not group:
                continue
            peaks = [r["peak_bytes"] for r in group if r["peak_bytes"] is not None]
            rows.append({
                "backend": backend, "mode": mode, "runs": len(group),
                "survived": sum(r["survived"] for r in group),
                "oom_kills": sum(r["oom_kills"] for r in group),
                **{k: sum(r[k] for r in group)
                   for k in ("completed", "evicted", "refused", "failed")},
                "peak_mib": round(max(peaks) / MIB, 1) if peaks else None,
                "limit_mib": group[0]["limit_bytes"] // MIB,
                "baseline_mib": round(max(r["baseline_bytes"] for r in group) / MIB, 1),
            })
    return rows


def markdown(result: dict[str, Any]) -> str:
    lines = ["| backend | mode | runs | survived | OOM kills | completed | evicted | refused (503)"
             " | failed | peak / limit (MiB) | start (MiB) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["table"]:
        lines.append(f"| {r['backend']} | {r['mode']} | {r['runs']} | {r['survived']} | "
                     f"{r['oom_kills']} | {r['completed']} | {r['evicted']} | {r['refused']} | "
                     f"{r['failed']} | {r['peak_mib']} / {r['limit_mib']} | "
                     f"{r['baseline_mib']} |")
    return "\n".join(lines)


def plot(json_path: Path, png_path: Path) -> None:
    """Memory over time of every run, guarded against unguarded, one panel per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc = json.loads(json_path.read_text())
    backends = list(dict.fromkeys(r["backend"] for r in doc["runs"]))
    fig, axes = plt.subplots(1, len(backends), figsize=(6.5 * len(backends), 4.2), squeeze=False)
    for ax, backend in zip(axes[0], backends, strict=True):
        for mode, colour in (("unguarded", "tab:red"), ("guarded", "tab:blue")):
            found = [r for r in doc["runs"] if r["backend"] == backend and r["mode"] == mode]
            for i, r in enumerate(found):
                label = f"{mode} ({len(found)} run{'s' if len(found) > 1 else ''})" if i == 0 \
                    else None
                ts = [t for t, _ in r["samples"]]
                ax.plot(ts, [b / MIB for _, b in r["samples"]], color=colour, label=label,
                        linewidth=1.4 if i == 0 else 0.9, alpha=1.0 if i == 0 else 0.6)
                if r["killed_at_s"] is not None and not r["survived"]:
                    ax.axvline(r["killed_at_s"], color=colour, linestyle=":")
                    ax.annotate(f"OOM kill ({mode}) {r['killed_at_s']:.1f} s",
                                (r["killed_at_s"], r["limit_bytes"] / MIB * (1.04 + 0.05 * i)),
                                xytext=(6, 0), textcoords="offset points", color=colour,
                                fontsize=8)
        limit = next(r["limit_bytes"] for r in doc["runs"] if r["backend"] == backend) / MIB
        ax.axhline(limit, color="black", linestyle="--", label=f"cgroup limit {limit:.0f} MiB")
        rates = sorted({r.get("rate") for r in doc["runs"] if r["backend"] == backend} - {None})
        per_s = f", {'/'.join(f'{x:g}' for x in rates)} new conversations/s" if rates else ""
        ax.set_title(f"{backend} backend{per_s}")
        ax.set_xlabel("seconds since the first request")
        ax.set_ylabel("cgroup memory charged (MiB)")
        ax.set_ylim(bottom=0, top=limit * 1.2)
        ax.legend(loc="lower right")
    fig.suptitle("Memory under ~3x the load that fits: guarded vs unguarded")
    fig.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(argv) if argv is not None else None
    raw = argv if argv is not None else sys.argv[1:]
    if raw[:1] == ["plot"]:
        if len(raw) != 3:
            raise SystemExit("usage: python -m benchmarks.oom_survival plot RUNS.json OUT.png")
        plot(Path(raw[1]), Path(raw[2]))
        return 0
    args = parse_args(argv)
    env = harness.environment(("uvicorn", "httpx", "fastapi", "vllm", "torch"))
    return harness.main("benchmarks.oom_survival", argv, args, env, run, markdown)


if __name__ == "__main__":
    raise SystemExit(main())
