"""The doctor's output: a rich table on a terminal, plain text in a pipe, JSON on request."""

from __future__ import annotations

import io
import json

import pytest

from llm_guard_sdk import cli
from llm_guard_sdk.doctor import Facts, report
from llm_guard_sdk.doctor.render import plain, render, rich_available


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def sample() -> dict[str, object]:
    return report(Facts(mode="url", target="http://x/llm-guard/status", worker_pid=42,
                        level="warn", pressure=0.8, limit_bytes=2**30, limit_source="cgroup",
                        rate_basis="measured over 1.00 s between two status samples"))


def test_plain_text_lists_every_indicator_with_its_fix() -> None:
    doc = sample()
    text = plain(doc)
    lines = text.splitlines()
    assert lines[0] == ("llm-guard doctor: http://x/llm-guard/status (worker pid 42): WARN "
                        "(exit 1)")
    assert lines[1].startswith("rates: measured over")
    assert any(line.startswith("WARN  level") for line in lines)
    assert any(line.strip().startswith("fix: the guard is at level warn") for line in lines)
    stream = io.StringIO()
    render(doc, stream, as_json=False)
    assert stream.getvalue() == text + "\n"


def test_json_on_request_even_on_a_terminal() -> None:
    stream = Terminal()
    render(sample(), stream, as_json=True)
    assert json.loads(stream.getvalue())["exit_code"] == 1


def test_a_terminal_gets_the_rich_table() -> None:
    if not rich_available():
        pytest.skip("rich is not installed: the plain text is used (tested above)")
    stream = Terminal()
    render(sample(), stream, as_json=False)
    out = stream.getvalue()
    assert "WARN" in out and "memory_limit" in out and "fix / note" in out
    assert out != plain(sample()) + "\n"  # a table, not the plain lines


def test_help_lists_the_doctors_exit_codes_and_rejects_bad_input(
        capsys: pytest.CaptureFixture[str]) -> None:
    parser = cli.build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["doctor", "--help"])
    text = capsys.readouterr().out
    for code in (0, 1, 2):
        assert f"\n  {code:<4} " in text
    for bad in (["doctor", "--pid", "0"], ["doctor", "--interval", "-1"]):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(bad)
        assert exited.value.code == 2
