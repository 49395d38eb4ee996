"""Failure messages of the pytest plugin: type, count, retained size, chain, graph.

Findings with the same kind, type, chain and note are merged (a leak per request usually
leaks the same way many times), so the message stays short and the count says how often.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm_guard_sdk.leaks import deps
from llm_guard_sdk.leaks.runtime.forensics import format_size

_KINDS = {
    "session": "session",
    "stream": "guarded stream",
    "generator": "stream source",
    "attachment": "attached object",
    "tracked": "tracked object",
    "asyncgen": "suspended async generator",
    "task-held": "object held by a pending task",
    "unclosed-asyncgen": "unclosed async generator",
    "growth": "instance growth",
    "revived": "object revived by __del__",
    "internal": "internal error",
}


@dataclass
class Finding:
    """One kind of leak found by a test's check."""

    kind: str
    type_name: str
    count: int
    size: int | None
    chain: str
    note: str = ""
    graph: str | None = None
    owner: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What identical findings share."""
        return (self.kind, self.type_name, self.chain, self.note)


def merge(findings: list[Finding]) -> list[Finding]:
    """Merge identical findings, summing counts and sizes; first seen first."""
    merged: dict[tuple[str, str, str, str], Finding] = {}
    for finding in findings:
        known = merged.get(finding.key)
        if known is None:
            merged[finding.key] = Finding(**vars(finding))
            continue
        known.count += finding.count
        if finding.size is not None:
            known.size = (known.size or 0) + finding.size
        known.graph = known.graph or finding.graph
    return list(merged.values())


def describe(finding: Finding) -> list[str]:
    """The lines of one finding."""
    what = _KINDS.get(finding.kind, finding.kind)
    title = f"{what}: {finding.type_name}" if finding.type_name else what
    size = f", {format_size(finding.size)} retained" if finding.size is not None else ""
    if finding.kind == "growth":
        head = f"- {title}: {finding.note}" + (f"; one new instance retains {size[2:-9]}"
                                               if size else "")
    else:
        head = f"- {title} x{finding.count}{size}"
    if finding.owner:
        head += f" ({finding.owner})"
    lines = [head]
    if finding.note and finding.kind != "growth":
        lines.append(f"    {finding.note}")
    if finding.chain:
        lines.append(f"    held by: {finding.chain}")
    if finding.graph:
        lines.append(f"    graph: {finding.graph}")
    return lines


def format_failure(test: str, findings: list[Finding]) -> str:
    """The whole failure message for ``test``."""
    merged = merge(findings)
    total = sum(f.count for f in merged)
    lines = [f"llm-guard: {total} leak{'s' if total != 1 else ''} in {test} "
             "(checked after teardown and gc.collect())"]
    for finding in merged:
        lines.extend(describe(finding))
    mode = deps.mode()
    if not mode["full"]:
        lines.append(f"(forensics {mode['text']})")
    return "\n".join(lines)
