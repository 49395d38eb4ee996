"""Print the doctor's report: a rich table on a terminal, plain text otherwise, or JSON.

rich is optional (not a dependency): the table is used only when stdout is a terminal and rich
imports; a pipe, a file, cron or CI get the plain text, which never depends on it.
"""

from __future__ import annotations

import importlib.util
import json
from typing import Any, TextIO

_MARK = {"ok": "OK", "warn": "WARN", "crit": "CRIT"}
_STYLE = {"ok": "green", "warn": "yellow", "crit": "bold red"}


def header(doc: dict[str, Any]) -> str:
    """The one line above the table: what was examined and the overall verdict."""
    target = doc["target"]
    worker = f" (worker pid {target['worker_pid']})" if target.get("worker_pid") else ""
    return (f"llm-guard doctor: {target['address']}{worker}: "
            f"{_MARK[doc['verdict']]} (exit {doc['exit_code']})")


def plain(doc: dict[str, Any]) -> str:
    """The report as plain text: one line per indicator, its fix or note indented below."""
    lines = [header(doc)]
    lines += [f"rates: {doc['rates']}"] if doc.get("rates") else []
    lines += [f"note: {note}" for note in doc.get("notes", [])]
    lines.append("")
    for item in doc["indicators"]:
        lines.append(f"{_MARK[item['verdict']]:<5} {item['name']:<17} {item['text']}")
        if item["verdict"] != "ok":
            lines.append(f"      fix: {item['fix']}")
        elif item["note"]:
            lines.append(f"      ({item['note']})")
    return "\n".join(lines)


def rich_available() -> bool:
    """Whether rich can be imported (checked without importing it)."""
    return importlib.util.find_spec("rich") is not None


def print_rich(doc: dict[str, Any], stream: TextIO) -> None:
    """The report as a rich table (verdicts coloured, fixes in their own column)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=stream)
    table = Table(title=header(doc), show_lines=True, expand=True)
    table.add_column("verdict", no_wrap=True)
    table.add_column("indicator", no_wrap=True)
    table.add_column("value", ratio=2, overflow="fold")
    table.add_column("fix / note", ratio=3, overflow="fold")
    for item in doc["indicators"]:
        advice = item["fix"] if item["verdict"] != "ok" else item["note"]
        table.add_row(Text(_MARK[item["verdict"]], style=_STYLE[item["verdict"]]),
                      item["name"], Text(item["text"]), Text(advice))
    console.print(table)
    for line in ([f"rates: {doc['rates']}"] if doc.get("rates") else []) + doc.get("notes", []):
        console.print(Text(line))


def render(doc: dict[str, Any], stream: TextIO, *, as_json: bool) -> None:
    """Print ``doc`` as JSON, a rich table (a terminal with rich) or plain text."""
    if as_json:
        stream.write(json.dumps(doc, indent=2) + "\n")
    elif stream.isatty() and rich_available():
        print_rich(doc, stream)
    else:
        stream.write(plain(doc) + "\n")
