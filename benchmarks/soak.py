"""Soak with abrupt disconnects: many concurrent streams for minutes, RSS recorded over time.

Run from the repository root: ``python -m benchmarks.soak --framework fastapi --streams 1000
--duration 600 --json .cache/soak.json --plot docs/images/soak_rss.png`` (``--quick``: 100
streams for 20 s; ``--framework all`` runs the three in turn).

Each framework's soak app (tests/proof/apps/) runs under real uvicorn; the client mix is
:mod:`tests.proof.load` (20 % TCP resets, slow and frozen readers, generators that raise,
handlers polling ``is_disconnected()``, SSE and WebSocket), the pass criteria those of
tests/proof/test_soak.py: every client saw what it should, nothing left open afterwards
(generators, simulator requests, sessions, streams), RSS after the load within 5 % of the
post-warm-up baseline (each a median of 5 samples taken after ``gc.collect()`` and
``malloc_trim`` in the server) and live objects within 2 %, no unexpected error in the
server log. The JSON keeps the RSS timeline (raw RSS every ``--sample-every`` s, and after
gc + ``malloc_trim`` every ``--settled-every`` s); ``--plot`` draws it (matplotlib, the
``bench`` extra).

``--backend vllm`` (FastAPI only) streams the tokens from a real vLLM engine on the tiny model
instead of the simulator (``SOAK_BACKEND=vllm``, see tests/proof/apps/soak_vllm.py), with the
mix sized for it (:data:`tests.proof.load.VLLM_SPEC`; full: 32 streams for 300 s, quick: 16
for 30 s) and the engine's own pass criteria (tests/proof/test_soak_vllm.py): no unfinished
request in the engine, its scheduler holding only a probe request afterwards, every abandoned
stream aborted in the engine. ``python -m benchmarks.soak --backend vllm --duration 300
--json .cache/soak-vllm.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from benchmarks import harness
from benchmarks.harness import Log
from tests.proof.checks import (
    SOAK_APPS,
    SOAK_ENV,
    VLLM_SOAK_ENV,
    settled,
    snapshot,
    unexpected_errors,
    vllm_engine_checks,
    wait_drained,
)
from tests.proof.load import VLLM_SPEC, LoadSpec, run_load
from tests.support.server import UvicornServer

RSS_TOLERANCE = 0.05
#: Sizes per backend when not given (``--quick`` or full).
SIZES = {"simulator": {"quick": {"streams": 100, "duration": 20, "warmup": 10},
                       "full": {"streams": 1000, "duration": 600, "warmup": 30}},
         "vllm": {"quick": {"streams": 16, "duration": 30, "warmup": 20},
                  "full": {"streams": 32, "duration": 300, "warmup": 60}}}


def _raise_fd_limit(streams: int) -> None:
    """Each stream is a socket on both sides: lift the soft limit (the server inherits it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 4 * streams + 256))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


async def _soak(framework: str, args: argparse.Namespace, log: Log) -> dict[str, Any]:
    vllm = args.backend == "vllm"
    server = UvicornServer(SOAK_APPS[framework],
                           env={**os.environ, **(VLLM_SOAK_ENV if vllm else SOAK_ENV)},
                           name=f"soak-bench-{framework}-{args.backend}", ready_path="/test/soak")
    server.start(timeout=600 if vllm else 60, attempts=1 if vllm else 3)
    spec = replace(VLLM_SPEC if vllm else LoadSpec(), streams=args.streams,
                   duration=args.duration)
    if args.freeze is not None:
        spec = replace(spec, freeze=args.freeze)
    probe: dict[str, Any] = {}
    timeline: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    try:
        async with httpx.AsyncClient(timeout=60, trust_env=False) as admin:

            async def sample(elapsed: float) -> None:
                try:
                    snap = await snapshot(admin, server.url)
                except httpx.HTTPError as exc:  # a saturated server: a gap, not the end
                    log(f"{framework}: sample at {elapsed:.0f} s failed: {exc!r}")
                    return
                timeline.append({"t": round(elapsed, 1), "rss_bytes": snap["app"]["rss_bytes"],
                                 "sessions": snap["sessions"],
                                 "generators_open": snap["generators_open"]})

            log(f"{framework}: warm-up, {args.streams} streams for {args.warmup:g} s")
            warm = await run_load(server.port, replace(spec, duration=args.warmup), seed=1)
            await wait_drained(admin, server.url, timeout=180)
            before_load = await settled(admin, server.url)
            baseline = before_load["rss_bytes"]
            before_snap = await snapshot(admin, server.url)
            before = before_snap["status"]
            log(f"{framework}: baseline RSS {baseline / 2**20:.1f} MiB; load for "
                f"{args.duration:g} s")
            started = loop.time()

            async def sampler() -> None:
                next_settled = args.settled_every
                while True:
                    elapsed = loop.time() - started
                    await sample(elapsed)
                    if elapsed >= next_settled and timeline:  # gc + malloc_trim: the trend
                        next_settled += args.settled_every
                        with contextlib.suppress(httpx.HTTPError):
                            measured = (await admin.post(f"{server.url}/test/measure")).json()
                            timeline[-1]["settled_rss_bytes"] = measured["rss_bytes"]
                    await asyncio.sleep(args.sample_every)

            sampling = asyncio.create_task(sampler())
            tally = await run_load(server.port, spec)
            load_end = loop.time() - started
            after = await wait_drained(admin, server.url, timeout=180)
            await asyncio.sleep(args.cooldown)  # raw RSS once the load is gone, for the plot
            sampling.cancel()
            after_load = await settled(admin, server.url)
            if vllm:
                probe = (await admin.post(f"{server.url}/test/engine-probe")).json()
            final = after_load["rss_bytes"]
            final_t = loop.time() - started
    finally:
        server.stop()
    timed_out = (after["status"]["sessions"]["send_timeout_total"]
                 - before["sessions"]["send_timeout_total"])
    errors = unexpected_errors(server.log_text(), send_timeouts=after["status"]["sessions"][
        "send_timeout_total"])
    growth = final / baseline - 1
    checks = {
        "clients_as_expected": tally.failures == 0 and warm.failures == 0,
        "frozen_cut_by_send_timeout": 0 < tally.count("cut") <= timed_out,
        "nothing_left_open": True,  # wait_drained raised otherwise
        "rss_within_5pct": growth <= RSS_TOLERANCE,
        "counts_within_2pct": all(after_load[k] <= before_load[k] * 1.02
                                  for k in ("gc_objects", "allocated_blocks")),
        "clean_log": not errors,
        "no_internal_errors": after["status"]["errors"]["internal_total"] == 0,
    }
    if vllm:  # the engine's side
        raised = (after["app"]["generators"]["raised"]
                  - before_snap["app"]["generators"]["raised"])
        checks.update(vllm_engine_checks(before_snap["app"]["backend"],
                                         after["app"]["backend"], tally.count("reset"),
                                         tally.count("cut"), raised, probe))
    log(f"{framework}: {tally.total} streams, RSS {growth:+.2%}, checks {checks}")
    return {"framework": framework, "backend_kind": args.backend, "probe": probe,
            "backend_before": before_snap["app"]["backend"], "streams": args.streams,
            "duration_s": args.duration,
            "streams_total": tally.total, "warmup_streams": warm.total,
            "outcomes": dict(tally.outcomes), "unexpected": tally.bad,
            "send_timeouts": timed_out, "generators": after["app"]["generators"],
            "backend": after["app"]["backend"],
            "rss_baseline_bytes": baseline, "rss_final_bytes": final,
            "rss_growth": round(growth, 4), "settled_before": before_load,
            "settled_after": after_load, "load_end_s": round(load_end, 1),
            "final_t_s": round(final_t, 1), "log_errors": errors[:10], "checks": checks,
            "passed": all(checks.values()), "timeline": timeline}


def run(args: argparse.Namespace, log: Log) -> dict[str, Any]:
    _raise_fd_limit(args.streams)
    names = list(SOAK_APPS) if args.framework == "all" else [args.framework]
    if args.backend == "vllm" and names != ["fastapi"]:
        raise SystemExit("--backend vllm: only the FastAPI soak app has the vLLM backend")
    runs = [asyncio.run(_soak(name, args, log)) for name in names]
    if args.plot is not None:
        plot(runs, args.plot, args)
    return {"runs": runs, "passed": all(r["passed"] for r in runs)}


def plot(runs: list[dict[str, Any]], path: Path, args: argparse.Namespace) -> None:
    """RSS over the soak per framework, with each post-warm-up baseline and its +5 % line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    for r in runs:
        ts = [p["t"] / 60 for p in r["timeline"]]
        line, = ax.plot(ts, [p["rss_bytes"] / 2**20 for p in r["timeline"]],
                        label=f"{r['framework']} (RSS, raw)")
        settled = [(p["t"] / 60, p["settled_rss_bytes"] / 2**20) for p in r["timeline"]
                   if "settled_rss_bytes" in p]
        if settled:
            ax.plot(*zip(*settled, strict=True), marker=".", linestyle="-", linewidth=0.8,
                    color=line.get_color(), alpha=0.6,
                    label=f"{r['framework']} (RSS after gc + malloc_trim)")
        base = r["rss_baseline_bytes"] / 2**20
        ax.axhline(base, color=line.get_color(), linestyle=":", linewidth=1)
        ax.axhline(base * (1 + RSS_TOLERANCE), color=line.get_color(), linestyle="--",
                   linewidth=1, label=f"{r['framework']} baseline +5 %")
        ax.plot([r["final_t_s"] / 60], [r["rss_final_bytes"] / 2**20], marker="o",
                color=line.get_color())
        ax.axvline(r["load_end_s"] / 60, color=line.get_color(), linestyle="-.", linewidth=0.8)
    ax.set_xlabel("minutes under load")
    ax.set_ylabel("server RSS (MiB)")
    ax.set_title(f"Soak: {args.streams} concurrent streams, 20 % TCP resets, slow/frozen "
                 "readers, raising generators", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)
    fig.text(0.01, 0.01, "dotted: baseline after warm-up (gc + malloc_trim); dash-dot: load "
             "stops; dot: final, after gc + malloc_trim", fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)


def report(result: dict[str, Any]) -> str:
    lines = [f"{'framework':<10} {'streams':>8} {'resets':>7} {'frozen cut':>10} "
             f"{'RSS base MiB':>12} {'RSS end MiB':>11} {'growth':>7}  passed"]
    for r in result["runs"]:
        resets = sum(n for k, n in r["outcomes"].items() if k.endswith(":reset"))
        lines.append(f"{r['framework']:<10} {r['streams_total']:>8} {resets:>7} "
                     f"{r['send_timeouts']:>10} {r['rss_baseline_bytes'] / 2**20:>12.1f} "
                     f"{r['rss_final_bytes'] / 2**20:>11.1f} {r['rss_growth']:>+7.2%}  "
                     f"{r['passed']}")
        if r.get("backend_kind") == "vllm":
            b0, b1 = r["backend_before"], r["backend"]
            lines.append(f"  vLLM: abandoned {b1['abandoned'] - b0['abandoned']}, aborted in "
                         f"the engine {b1['engine_aborted'] - b0['engine_aborted']}, engine "
                         f"unfinished {b1['open']}, scheduler during probe {r['probe']}")
        if not r["passed"]:
            lines.append(f"  failed: {[k for k, v in r['checks'].items() if not v]} "
                         f"{r['unexpected'][:3]} {r['log_errors'][:3]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = harness.new_parser("benchmarks.soak", __doc__ or "")
    parser.add_argument("--framework", choices=[*SOAK_APPS, "all"], default="fastapi")
    parser.add_argument("--streams", type=int, help="concurrent streams (full: 1000)")
    parser.add_argument("--duration", type=float, help="seconds of load (full: 600)")
    parser.add_argument("--warmup", type=float, help="seconds of warm-up before the baseline")
    parser.add_argument("--sample-every", type=float, default=5.0, help="RSS sampling, s")
    parser.add_argument("--backend", choices=list(SIZES), default="simulator",
                        help="where the tokens come from: the simulator, or a real vLLM "
                             "engine on the tiny model (FastAPI only)")
    parser.add_argument("--freeze", type=float,
                        help="seconds a frozen reader stays silent before it drains "
                             "(default 8; vLLM: 10)")
    parser.add_argument("--cooldown", type=float, default=15.0,
                        help="seconds of raw RSS samples after the load, before the final one")
    parser.add_argument("--settled-every", type=float, default=60.0,
                        help="seconds between RSS samples taken after gc + malloc_trim")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="draw the RSS timeline")
    args = harness.parse(parser, argv, quick={}, full={})
    for key, value in SIZES[args.backend]["quick" if args.quick else "full"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    env = harness.environment(["uvicorn", "fastapi", "litestar", "channels", "httptools",
                               "vllm"], backend=args.backend)
    code = harness.main("benchmarks.soak", argv, args, env, run, report)
    return code


if __name__ == "__main__":
    sys.exit(main())
