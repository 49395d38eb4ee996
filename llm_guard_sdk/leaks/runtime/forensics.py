"""Evidence about one leaked object: chain, retained size, allocation site, suspended frame.

Only ever run for objects already found alive after close and a collection, so the cost
(heap scans, deep walks) is paid per leak, never per request. Reports hold names, types,
sizes and source locations; an object's ``repr`` (which may carry prompt text) is included
only when content logging is on.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
import types
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_guard_sdk.leaks import deps
from llm_guard_sdk.leaks.runtime.chains import label, search
from llm_guard_sdk.leaks.runtime.graph import draw_backrefs
from llm_guard_sdk.leaks.runtime.introspect import is_a, is_any, type_name
from llm_guard_sdk.leaks.runtime.tracking import Tracked

_SHARED_TYPES = (types.ModuleType, type, types.FunctionType, types.CodeType,
                 types.BuiltinFunctionType)
# Our own references while walking: the variable, getrefcount's argument, the referents list.
_WALK_REFS = 3


@dataclass
class Limits:
    """Bounds on the forensics of one object.

    The chain search costs one heap scan per level of ``chain_depth``, so the depth bounds it;
    ``chain_timeout`` (seconds, checked between levels) is an optional further bound, off by
    default so that what is found does not depend on how busy the machine is.
    """

    chain_depth: int = 12
    chain_timeout: float | None = None
    size_max_objects: int = 20000
    graph_dir: Path | None = None
    log_content: bool = False


def retained_size(obj: object, max_objects: int = 20000) -> int | None:
    """Bytes freed if ``obj`` went: objects reachable from it that nothing else holds.

    A breadth-first walk over ``gc.get_referents`` admits a child once every reference to it
    is accounted for by edges from objects already admitted, so shared state (the registry,
    the app, modules) is never counted; sizes are pympler's flat sizes. None without pympler.
    """
    asizeof = deps.load_asizeof()
    if asizeof is None:
        return None
    admitted: dict[int, object] = {id(obj): obj}
    indegree: dict[int, int] = {}
    queue: deque[object] = deque([obj])
    while queue and len(admitted) < max_objects:
        referents = gc.get_referents(queue.popleft())
        for child in referents:
            key = id(child)
            if key in admitted or is_any(child, _SHARED_TYPES):
                continue
            indegree[key] = indegree.get(key, 0) + 1
            if sys.getrefcount(child) - _WALK_REFS <= indegree[key]:
                admitted[key] = child
                queue.append(child)
        del referents
    try:
        return int(sum(asizeof.flatsize(o) for o in admitted.values()))
    except Exception:  # an exotic extension type pympler cannot size
        return None


def allocation_site(obj: object, limit: int = 8) -> list[str] | None:
    """Where ``obj`` was allocated (most recent call last) when tracemalloc traced it."""
    if not tracemalloc.is_tracing():
        return None
    trace = tracemalloc.get_object_traceback(obj)
    if trace is None:
        return None
    return [f"{frame.filename}:{frame.lineno}" for frame in list(trace)[-limit:]]


def frame_info(obj: object) -> dict[str, Any] | None:
    """Where a generator or coroutine is suspended and what its frame holds (names, types)."""
    if is_a(obj, types.AsyncGeneratorType):
        frame = obj.ag_frame
    elif is_a(obj, types.CoroutineType):
        frame = obj.cr_frame
    elif is_a(obj, types.GeneratorType):
        frame = obj.gi_frame
    else:
        return None
    if frame is None:
        return None
    return {
        "suspended_at": f"{frame.f_code.co_filename}:{frame.f_lineno}",
        "function": frame.f_code.co_qualname,
        "locals": {str(k): label(v) for k, v in list(frame.f_locals.items())[:20]},
    }


def safe_repr(obj: object, limit: int = 200) -> str:
    """``repr`` for content-logging mode; a failing ``__repr__`` must not break a report."""
    try:
        return repr(obj)[:limit]
    except Exception as exc:
        return f"<repr failed: {type(exc).__name__}>"


def examine(obj: object, record: Tracked | None, *, limits: Limits, ignore: Iterable[int] = (),
            graph_name: str = "leak") -> dict[str, Any]:
    """Everything we report about one leaked object, as JSON-safe values; never raises.

    Leaked objects are arbitrary app objects (hostile ``__getattr__``, broken ``__repr__``):
    a failure is reported in the ``error`` field instead of losing the report.
    """
    try:
        return _examine(obj, record, limits=limits, ignore=ignore, graph_name=graph_name)
    except Exception as exc:
        described = record.describe() if record is not None else {"type": type_name(obj)}
        return {**described, "size_bytes": None, "allocated_at": None, "frame": None,
                "graph": None, "error": f"forensics failed: {type(exc).__name__}: {exc}"[:300],
                "chain": {"status": "error", "steps": [], "text": "forensics failed"}}


def _examine(obj: object, record: Tracked | None, *, limits: Limits, ignore: Iterable[int],
             graph_name: str) -> dict[str, Any]:
    skip = set(ignore)
    found, chain = search(obj, max_depth=limits.chain_depth, timeout=limits.chain_timeout,
                          ignore=skip, log_content=limits.log_content)
    skip.add(id(found))
    report: dict[str, Any] = {
        **(record.describe() if record is not None else {"type": type_name(obj)}),
        "size_bytes": retained_size(obj, limits.size_max_objects),
        "chain": chain.as_dict(),
        "allocated_at": allocation_site(obj),
        "frame": frame_info(obj),
        "graph": None,
    }
    if limits.log_content:
        report["repr"] = safe_repr(obj)
    if limits.graph_dir is not None and found:
        report["graph"] = draw_backrefs(obj, found, limits.graph_dir / f"{graph_name}.png",
                                        ignore=skip, log_content=limits.log_content)
    del found
    return report


def format_size(size: int | None) -> str:
    """Human size for messages: ``1.2 MiB``, or ``size unknown`` (no pympler, or unsizable)."""
    if size is None:
        return "size unknown"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover
