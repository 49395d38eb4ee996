"""A PNG of who holds a leaked object (objgraph ``show_backrefs`` rendered by graphviz).

objgraph labels nodes with ``repr()`` and dict edges with the key, both of which can carry
prompt text; unless content logging is on, every node is relabelled with its type (and length
for containers) and dict keys are redacted before ``dot`` ever sees the graph. The graph is
limited to the shortest chain plus the object's direct holders, so it stays readable and cheap.
"""

from __future__ import annotations

import gc
import io
import re
import subprocess
from collections.abc import Iterable, Sized
from pathlib import Path
from typing import Any, cast

from llm_guard_sdk.leaks import deps
from llm_guard_sdk.leaks.runtime.backrefs import stack_ids
from llm_guard_sdk.leaks.runtime.chains import label, namespace, redact_key
from llm_guard_sdk.leaks.runtime.introspect import is_a, is_any

_NODE = re.compile(r'^(\s*)(o\d+)\[label="(?:[^"\\]|\\.)*"')
_EDGE = re.compile(r'^(\s*)(o\d+) -> (o\d+) \[label="(?:[^"\\]|\\.)*"')
_SIZED = (dict, list, tuple, set, frozenset)


def _node_label(obj: object) -> str:
    text = label(obj)
    if is_any(obj, _SIZED):
        text += f"\\n{len(cast(Sized, obj))} items"
    return text.replace('"', "'")


def redact_dot(dot: str, known: dict[str, Any]) -> str:
    """Relabel nodes by type and dict edges by redacted key (attribute names are kept)."""
    namespaces = {id(namespace(o)) for o in known.values()}
    out = []
    for line in dot.splitlines():
        node = _NODE.match(line)
        if node and node.group(2) in known:
            line = f'{node.group(1)}{node.group(2)}[label="{_node_label(known[node.group(2)])}"' \
                + line[node.end():]
        edge = _EDGE.match(line)
        source_obj = known.get(edge.group(2)) if edge else None
        if edge and is_a(source_obj, dict) and id(source_obj) not in namespaces:
            source, target = known[edge.group(2)], known.get(edge.group(3))
            key = next((k for k, v in list(source.items()) if v is target), None)
            text = redact_key(key).replace('"', "'")
            line = f'{edge.group(1)}{edge.group(2)} -> {edge.group(3)} [label="{text}"' \
                + line[edge.end():]
        out.append(line)
    return "\n".join(out) + "\n"


def draw_backrefs(obj: object, chain: list[Any], path: Path, *, ignore: Iterable[int] = (),
                  log_content: bool = False, timeout: float = 10.0) -> str | None:
    """Write a PNG of ``obj``'s holders along ``chain`` (root first) to ``path``.

    Returns the path, or None where objgraph or graphviz ``dot`` is missing or ``dot`` failed.
    """
    objgraph, dot = deps.load_objgraph(), deps.dot_path()
    if objgraph is None or dot is None:
        return None
    skip = stack_ids() | set(ignore)
    holders = [r for r in gc.get_referrers(obj) if id(r) not in skip][:10]
    known = {f"o{id(o)}": o for o in [*chain, *holders, obj]}
    allowed = {id(o) for o in known.values()}
    buffer = io.StringIO()
    objgraph.show_backrefs([obj], max_depth=max(1, len(chain)), output=buffer, too_many=10,
                           filter=lambda o: id(o) in allowed,
                           extra_ignore=tuple(skip | {id(chain), id(holders), id(known)}))
    text = buffer.getvalue()
    if not log_content:
        text = redact_dot(text, known)
    del chain, holders, known
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([dot, "-Tpng", "-o", str(path)], input=text.encode(), timeout=timeout,
                       check=True, capture_output=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return str(path)
