"""The shortest chain of references from a root to an object: breadth first, one heap scan a level.

``gc.get_referrers`` scans the whole heap on every call, so asking it once per visited object
(objgraph's ``find_backref_chain``) costs O(heap x objects visited): with vLLM and torch
imported, ~100 ms a call, and a depth-6 chain took most of a second. Here each *depth level*
costs one scan: every referrer of the whole frontier is found at once and mapped back, through
``gc.get_referents``, to the frontier object it holds. The cost is O(heap x depth) whatever the
frontier's size:

* a small frontier is passed to ``gc.get_referrers(*frontier)``, whose C scan compares every
  reference it sees with each argument in turn (cost grows with the number of arguments);
* a large one is looked up in a set of ids during one pass over ``gc.get_objects()``, slower
  per object but independent of the frontier's size.

The search holds every object it visits (so their ids stay valid) in containers of its own,
which, like its frames, are never taken for holders. The caller should collect garbage first:
unreachable cycles only make the search visit more.
"""

from __future__ import annotations

import gc
import sys
import time
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

# Up to this many frontier objects, gc.get_referrers(*frontier) beats a Python pass over
# gc.get_objects(). Measured at 600k objects (vLLM and torch imported, then padded): 1 argument
# 45 ms, 8: 78 ms, 64: 156 ms, 128: 259 ms, 256: 660 ms; the Python pass 670 ms at any size.
MAX_REFERRERS_ARGS = 192


def stack_ids() -> set[int]:
    """Ids of the caller's frames, which hold the object being searched in their locals."""
    ids: set[int] = set()
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        ids.add(id(frame))
        frame = frame.f_back
    return ids


@dataclass(slots=True)
class BackrefSearch:
    """How a search ended: ``chain`` (root first, the object last), None when none was found.

    ``gave_up`` is True when the deadline passed before the depth bound; ``visited`` counts the
    distinct objects reached (the object itself included); ``depth`` the levels scanned.
    """

    chain: list[Any] | None = None
    visited: int = 1
    depth: int = 0
    gave_up: bool = False


def shortest_chain(target: object, is_root: Callable[[object], bool], *, max_depth: int,
                   ignore: Iterable[int] = (), deadline: float | None = None) -> BackrefSearch:
    """Search breadth first from ``target`` back to an object ``is_root`` accepts.

    Args:
        target: The object whose holders are searched.
        is_root: Accepts what is alive by itself (modules, pending tasks, ...).
        max_depth: At most this many references between the root and ``target``.
        ignore: Ids of the caller's own holders (its frames are skipped anyway).
        deadline: ``time.monotonic()`` value after which no further level is scanned; None
            for none (the depth bound alone bounds the cost).
    """
    if max_depth < 1:
        raise ValueError(f"max_depth must be at least 1, not {max_depth!r}")
    nodes: dict[int, object] = {id(target): target}  # every object reached, by id
    toward: dict[int, object] = {}  # id of a holder -> the object it holds, one step closer
    frontier: list[object] = [target]
    skip = set(ignore) | stack_ids()
    skip.update((id(nodes), id(toward)))
    result = BackrefSearch()
    for depth in range(1, max_depth + 1):
        if deadline is not None and time.monotonic() >= deadline:
            result.gave_up = True
            break
        result.depth = depth
        holders = _holders(frontier, skip)
        frontier = []
        for holder, held in holders:
            key = id(holder)
            if key in nodes:
                continue
            nodes[key] = holder
            toward[key] = held
            if is_root(holder):
                result.chain = _walk(holder, target, toward)
                result.visited = len(nodes)
                return result
            frontier.append(holder)
        del holders
        if not frontier:
            break
    result.visited = len(nodes)
    return result


def _holders(frontier: list[object], skip: set[int]) -> list[tuple[object, object]]:
    """Every object referring to one of ``frontier``, with the one it holds.

    Skipped: the ids in ``skip`` and this level's own containers (the frontier, the argument
    tuple, the candidate list, the result), whose ids are never kept beyond the level: a later
    object may reuse them.
    """
    wanted = {id(obj) for obj in frontier}
    own = skip | {id(frontier), id(sys._getframe())}
    if len(frontier) <= MAX_REFERRERS_ARGS:
        args = tuple(frontier)
        own.add(id(args))
        candidates = gc.get_referrers(*args)
        del args
    else:
        candidates = gc.get_objects()
    out: list[tuple[object, object]] = []
    own.update((id(candidates), id(out)))
    get_referents = gc.get_referents
    for candidate in candidates:
        if id(candidate) in own:
            continue
        for child in get_referents(candidate):
            if id(child) in wanted:
                out.append((candidate, child))
                break
    del candidates
    return out


def _walk(root: object, target: object, toward: dict[int, object]) -> list[Any]:
    """The chain from ``root`` to ``target`` along the recorded steps."""
    chain = [root]
    obj = root
    while obj is not target:
        obj = toward[id(obj)]
        chain.append(obj)
    return chain
