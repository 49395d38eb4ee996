"""The overhead benchmarks run end to end at a tiny size (counts and states, never speed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import hotpath, peers, plots, ws_scale
from benchmarks.harness import log


def test_hotpath_measures_every_variant_and_leaves_nothing_open() -> None:
    args = hotpath.parse_args(["--chunks", "50", "--repeats", "2"])
    result = hotpath.run(args, log)
    assert set(result["added_cpu_ns_per_chunk"]) == set(hotpath.VARIANTS) - {"bare"}
    assert all(len(v) == 2 for v in result["samples_cpu_ns_per_chunk"].values())
    assert result["sessions_left_open"] == 0
    assert result["internal_errors_total"] == 0


def test_ws_scale_opens_and_closes_every_session() -> None:
    args = ws_scale.parse_args(["--sessions", "40", "--rounds", "1", "--ticks", "2",
                                  "--tick-gap", "0"])
    result = ws_scale.run(args, log)
    assert result["idle_sessions_seen"] == 40  # every connection was open and idle at once
    assert result["sessions_left_open"] == 0
    assert result["tick_ms"]["warn"]["level_seen"] == "warn"
    assert len(result["memory_rounds"]["guarded"]) == 1
    assert len(result["memory_rounds"]["wrapping"]) == 1  # the floor the bookkeeping is over
    assert "median_bookkeeping_bytes_per_session" in result


@pytest.mark.e2e
def test_peers_drives_real_servers_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    assert peers.main(["--clients", "2", "--chunks", "20", "--rounds", "1", "--client", "raw",
                       "--variants", "bare", "guard", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    summary = result["clients"]["raw"]["summary"]
    assert set(summary) == {"bare", "guard"}
    assert summary["bare"]["ratio_to_bare"] == 1.0
    # Warm-up and timed round, two clients each: every stream went through the guard.
    status = result["guard_status_after"]
    assert status["sessions_opened_total"] >= 4
    assert status["streams_completed_total"] == 4
    assert status["streams_open"] == 0
    assert status["internal_errors_total"] == 0
    png = tmp_path / "overhead.png"
    assert plots.main(["overhead", "--from", str(out), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_refuses_a_file_that_is_not_a_peers_result(tmp_path: Path) -> None:
    bad = tmp_path / "other.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit):
        plots.main(["overhead", "--from", str(bad), "--out", str(tmp_path / "x.png")])
