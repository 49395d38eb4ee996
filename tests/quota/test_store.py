"""Saving and loading observations: round trip, the start-up file, and files that do not parse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llm_guard_sdk import ConfigError
from llm_guard_sdk.quota import QuotaRecorder, QuotaSettings, read_document
from tests.support import FakeSource, make_guard
from tests.support.quota import recorder_guard, synthetic

pytestmark = pytest.mark.anyio


async def test_save_and_load_round_trip(tmp_path: Path) -> None:
    guard, _, _, recorder = recorder_guard()
    rows = synthetic(noise=1e6)
    for obs in rows:
        recorder.add_observation(obs)
    path = tmp_path / "observations.json"
    recorder.save(path)
    document = read_document(path)
    assert document.observations == tuple(rows)
    assert document.limit_bytes == recorder.document().limit_bytes
    assert document.evict_at == guard.config.evict_at
    assert json.loads(path.read_text())["fit"]["n"] == len(rows)
    _, _, _, fresh = recorder_guard()
    assert fresh.load(path) == len(rows)
    assert fresh.observations == tuple(rows)
    assert fresh.current_fit() == recorder.current_fit()


@pytest.mark.parametrize(("content", "why"), [
    ("{not json", "not a valid quota document"),
    ("[1, 2]", "expected a JSON object"),
    ('{"observations": 3}', "'observations' list"),
    ('{"observations": [{"qps": 1}]}', "observation 0: observation lacks context_tokens"),
    ('{"observations": [{"qps": -1, "context_tokens": 1, "peak_process_bytes": 1}]}',
     "'qps' must be a finite number >= 0"),
    ('{"observations": [], "evict_at": 2}', "'evict_at' is invalid"),
    ('{"observations": [], "version": 9}', "unsupported version"),
])
def test_a_bad_file_is_a_config_error_naming_it(tmp_path: Path, content: str, why: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    recorder = QuotaRecorder(QuotaSettings())
    with pytest.raises(ConfigError) as raised:
        recorder.load(path)
    assert str(path) in str(raised.value) and why in str(raised.value)


def test_a_missing_or_binary_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        read_document(tmp_path / "absent.json")
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match=r"binary\.json"):
        read_document(tmp_path / "binary.json")


def test_the_startup_file_stops_start_up_when_it_does_not_parse(tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    path.write_text("{oops")
    guard = make_guard(FakeSource())
    with pytest.raises(ConfigError) as raised:
        guard.add_extension(QuotaRecorder(QuotaSettings(file=str(path))))
    assert "LLM_GUARD_QUOTA_FILE" in str(raised.value) and str(path) in str(raised.value)
    assert guard.extension("quota") is None


async def test_the_startup_file_is_loaded_then_rewritten_after_each_window(
        tmp_path: Path) -> None:
    path = tmp_path / "quota.json"
    assert not path.exists()  # a first run starts without one
    guard, _, clock, recorder = recorder_guard(file=str(path))
    recorder.observe_request(42)
    clock.now += 10
    await guard.tick()
    saved = read_document(path)
    assert [o.context_tokens for o in saved.observations] == [42]
    restarted = QuotaRecorder(QuotaSettings(file=str(path)))
    make_guard(FakeSource()).add_extension(restarted)
    assert [o.context_tokens for o in restarted.observations] == [42]


async def test_a_failed_write_is_counted_not_raised(tmp_path: Path) -> None:
    guard, _, clock, recorder = recorder_guard(file=str(tmp_path / "missing-dir" / "quota.json"))
    recorder.observe_request(42)
    clock.now += 10
    await guard.tick()
    assert recorder.save_errors_total == 1
    assert guard.internal_errors_total == 0
    assert len(recorder.observations) == 1
