"""``llm-guard plan``: from a file, from a real uvicorn server, and its one-line errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_guard_sdk import cli
from llm_guard_sdk.quota import Observation, QuotaDocument, QuotaFit, fit, write_document
from tests.support import free_port, run_cli, uvicorn_server
from tests.support.quota import synthetic

TOKEN = "plan-token-1234"
LIMIT = 4 * 2**30


@pytest.fixture
def observations(tmp_path: Path) -> Path:
    path = tmp_path / "observations.json"
    write_document(path, QuotaDocument(tuple(synthetic(noise=1e6)), limit_bytes=LIMIT,
                                       evict_at=0.85, mean_session_seconds=12.0))
    return path


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    assert cli.main(["plan", "--json", *args]) == cli.EXIT_OK
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def test_plan_from_a_file(observations: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = plan_json(capsys, "--qps", "200", "--context", "8192", "--from", str(observations))
    model = fit(synthetic(noise=1e6))
    assert result["predicted_bytes"] == pytest.approx(model.predict(200, 8192))
    expected = model.capacity(LIMIT, 0.85, context_tokens=8192, session_seconds=12.0)
    assert result["capacity"] == pytest.approx(expected.to_dict())
    assert result["session_seconds"] == 12.0 and result["limit_bytes"] == LIMIT


def test_flags_override_the_data(observations: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = plan_json(capsys, "--qps", "1", "--context", "1000", "--from", str(observations),
                       "--limit", "8GiB", "--evict-at", "0.5", "--duration", "3")
    model = QuotaFit(**result["fit"])  # type: ignore[arg-type]
    assert result["capacity"] == pytest.approx(model.capacity(
        8 * 2**30, 0.5, context_tokens=1000, session_seconds=3).to_dict())


def test_the_summary_as_a_user_sees_it(observations: Path) -> None:
    done = run_cli("plan", "--qps", "200", "--context", "8192", "--from", str(observations))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("model      M = alpha*QPS*L + beta*sqrt(L) + gamma")
    assert any(line.startswith("fit        R^2 ") for line in lines)
    assert any(line.startswith("predicted  ") and "at 200 req/s" in line for line in lines)
    assert lines[-1].startswith("capacity   ") and "concurrent sessions at 8192 tokens" in lines[-1]


def test_without_limit_or_duration_it_says_what_to_pass(tmp_path: Path) -> None:
    path = tmp_path / "bare.json"
    write_document(path, QuotaDocument(tuple(synthetic(noise=0.0))))
    done = run_cli("plan", "--qps", "1", "--context", "100", "--from", str(path))
    assert done.returncode == 0 and "pass --limit" in done.stdout
    done = run_cli("plan", "--qps", "1", "--context", "100", "--from", str(path), "--limit", "1G")
    assert done.returncode == 0 and "pass --duration" in done.stdout


def one_line_error(*args: str) -> str:
    done = run_cli("plan", "--qps", "1", "--context", "100", *args)
    assert done.returncode == cli.EXIT_USAGE, done
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    return done.stderr


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    assert "cannot be read" in one_line_error("--from", str(tmp_path / "absent.json"))
    (tmp_path / "bad.json").write_text("{nope")
    assert "bad.json" in one_line_error("--from", str(tmp_path / "bad.json"))


def test_too_little_data_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "few.json"
    write_document(path, QuotaDocument(tuple(synthetic(noise=0.0)[:3])))
    message = one_line_error("--from", str(path))
    assert "too little data" in message and "3 observation(s)" in message


def test_constant_context_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "flat.json"
    write_document(path, QuotaDocument(tuple(Observation(q, 100.0, 10**9) for q in range(1, 9))))
    assert "context length L is constant" in one_line_error("--from", str(path))


def test_an_unreachable_server_exits_2() -> None:
    assert "Connection refused" in one_line_error("--url", f"http://127.0.0.1:{free_port()}")


@pytest.mark.parametrize(("args", "option"), [
    (["--qps", "-1", "--context", "10"], "--qps"),
    (["--qps", "1", "--context", "0"], "--context"),
    (["--qps", "1", "--context", "9", "--evict-at", "2"], "--evict-at"),
    (["--qps", "1", "--context", "9", "--limit", "lots"], "--limit"),
])
def test_bad_arguments_exit_2(args: list[str], option: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["plan", *args])
    assert exited.value.code == cli.EXIT_USAGE
    assert f"error: argument {option}: " in capsys.readouterr().err


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The seeded quota app behind a status token, under real uvicorn."""
    path = tmp_path_factory.mktemp("seed") / "quota.json"
    write_document(path, QuotaDocument(tuple(synthetic(noise=1e6)), mean_session_seconds=12.0))
    env = {"LLM_GUARD_STATUS_TOKEN": TOKEN, "LLM_GUARD_TEST_QUOTA_FILE": str(path)}
    with uvicorn_server("tests.quota.apps.seeded_app:app", env, ready_path="/") as base:
        yield base
    shutil.rmtree(path.parent, ignore_errors=True)


def test_plan_from_a_real_server(server: str) -> None:
    denied = run_cli("--url", server, "plan", "--qps", "200", "--context", "8192")
    assert denied.returncode == cli.EXIT_SERVER_ERROR and "HTTP 401" in denied.stderr
    done = run_cli("plan", "--url", server, "--token", TOKEN, "--qps", "200", "--context",
                   "8192", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    model = fit(synthetic(noise=1e6))
    assert result["source"] == f"{server}/llm-guard/quota"
    assert result["predicted_bytes"] == pytest.approx(model.predict(200, 8192))
    assert result["limit_bytes"] > 0 and result["evict_at"] == 0.85  # the server's guard
    assert result["capacity"]["sessions"] == model.sessions_that_fit(
        result["limit_bytes"], 0.85, context_tokens=8192, session_seconds=12.0)


def test_a_server_without_the_extension_is_a_server_error(server: str) -> None:
    done = run_cli("plan", "--url", server, "--token", TOKEN, "--prefix", "/nope",
                   "--qps", "1", "--context", "10")
    assert done.returncode == cli.EXIT_SERVER_ERROR
