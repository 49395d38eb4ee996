"""Who holds a leaked object: the shortest back-reference chain to a root, rendered for humans.

The search (:mod:`~llm_guard_sdk.leaks.runtime.backrefs`) is breadth first with one heap scan
per depth level, so the chain is the shortest and its cost is bounded by the depth, not by the
clock; an optional deadline is checked between levels and the report says when it gave up.
Roots are imported modules and pending asyncio tasks (a task the loop still runs keeps its
coroutine's locals alive). The rendering names each hop by how it holds the next one, e.g.
``module myapp.cache -> dict CONTEXTS -> dict['sess-…'] -> list -> Context``; dict keys are
redacted unless content logging is on, because keys are often user text.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import re
import sys
import time
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from llm_guard_sdk.leaks.runtime.backrefs import shortest_chain
from llm_guard_sdk.leaks.runtime.introspect import is_a, is_any

_PREFIX = re.compile(r"[A-Za-z]{1,12}[-_:.]")  # an id prefix such as sess- or conn:
_GENERATORS = (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
_SEQUENCES = (list, tuple, set, frozenset)


@dataclass(slots=True)
class Chain:
    """A rendered chain (root first) and how the search ended."""

    steps: list[str] = field(default_factory=list)
    status: str = "found"  # found | no_root | gave_up
    detail: str = ""

    @property
    def text(self) -> str:
        """The chain as one line, or why there is none."""
        return " -> ".join(self.steps) if self.status == "found" else self.detail

    def as_dict(self) -> dict[str, Any]:
        """JSON form for reports."""
        return {"status": self.status, "steps": list(self.steps), "text": self.text}


def is_root(obj: object) -> bool:
    """True for what is alive by itself: an imported module, a pending task, an event loop.

    The loop counts so that what it merely has scheduled (a cancelled timer's context) is
    not blamed on whichever pending task happens to reference the loop.
    """
    if is_a(obj, types.ModuleType):
        return sys.modules.get(obj.__name__) is obj
    if is_a(obj, asyncio.Task):
        return not obj.done()
    return is_any(obj, (asyncio.AbstractEventLoop,))


def find_chain(obj: object, *, max_depth: int = 12, timeout: float | None = None,
               ignore: Iterable[int] = (), log_content: bool = False) -> Chain:
    """The shortest chain from a root to ``obj``, rendered; bounded by depth (and ``timeout``).

    Collect garbage first (``gc.collect()``): unreachable cycles only make the search longer.
    """
    found, chain = search(obj, max_depth=max_depth, timeout=timeout, ignore=ignore,
                          log_content=log_content)
    del found
    return chain


def search(obj: object, *, max_depth: int = 12, timeout: float | None = None,
           ignore: Iterable[int] = (), log_content: bool = False) -> tuple[list[Any], Chain]:
    """Like :func:`find_chain`, also returning the chain's objects (root first; [] if none).

    The caller must drop the list promptly: it holds every object on the chain. ``timeout``
    (seconds, None for none) is checked between depth levels, each one heap scan.
    """
    target = id(obj)
    deadline = None if timeout is None else time.monotonic() + timeout
    result = shortest_chain(obj, lambda candidate: id(candidate) != target
                            and is_root(candidate), max_depth=max_depth, ignore=ignore,
                            deadline=deadline)
    if result.gave_up:
        return [], Chain(status="gave_up", detail=f"gave up after {timeout:g} s "
                         f"({result.visited} objects visited, {result.depth} of "
                         f"{max_depth} levels searched)")
    found = result.chain
    if found is None:
        return [], Chain(status="no_root", detail=(
            f"no root within {max_depth} references ({result.visited} objects visited): held "
            "only by something the garbage collector cannot see, such as a running frame or "
            "thread, or a C extension"))
    return found, Chain(steps=render(found, log_content=log_content))


def render(chain: list[Any], *, log_content: bool = False) -> list[str]:
    """Name each hop of a root-first chain by how the previous object holds the next."""
    steps = [label(chain[0])]
    i = 1
    while i < len(chain):
        prev, obj = chain[i - 1], chain[i]
        nxt = chain[i + 1] if i + 1 < len(chain) else None
        if is_a(obj, dict) and nxt is not None and namespace(prev) is obj:
            steps.append(f"{label(nxt)} {_key_of(obj, nxt, log_content)}")
            i += 2
            continue
        if (is_a(prev, types.FunctionType) and obj is prev.__closure__
                and nxt is not None and i + 2 < len(chain)):
            steps.append(f"closure {_freevar(prev, nxt)}")
            steps.append(label(chain[i + 2]))
            i += 3
            continue
        if is_a(prev, contextvars.Context) and _is_hamt(obj):
            while i < len(chain) - 1 and _is_hamt(chain[i]):
                i += 1  # the context's internal tree: name the variable instead
            obj = chain[i]
        steps.extend(_hop(prev, obj, log_content))
        i += 1
    return steps


def _is_hamt(obj: object) -> bool:
    return type(obj).__name__.startswith("hamt")


def label(obj: object) -> str:
    """Short description of one object: type and name, never its content."""
    if is_a(obj, types.ModuleType):
        return f"module {obj.__name__}"
    if is_a(obj, asyncio.Task):
        state = "pending" if not obj.done() else "done"
        return f"Task {obj.get_name()} ({state})"
    if is_a(obj, type):
        return f"class {obj.__qualname__}"
    if is_any(obj, (types.FunctionType, types.MethodType, *_GENERATORS)):
        # the type is known, so reading the name runs no code of the object's
        return f"{type(obj).__name__} {getattr(obj, '__qualname__', '?')}"
    if is_a(obj, types.FrameType):
        return f"frame {obj.f_code.co_qualname}"
    if is_a(obj, contextvars.Context):
        return "contextvars.Context"
    return type(obj).__qualname__


def redact_key(key: object, log_content: bool = False) -> str:
    """A dict key for reports: ints as is, ids by their prefix (``'sess-…'``), else a shape."""
    if log_content:
        return repr(key)[:80]
    if key is None or is_any(key, (bool, int, float)):
        return repr(key)
    if is_a(key, str):
        match = _PREFIX.match(key)
        return f"'{match.group(0)}…'" if match else f"<str len={len(key)}>"
    if is_a(key, bytes) or is_a(key, tuple):
        return f"<{type(key).__name__} len={len(key)}>"
    return f"<{type(key).__qualname__}>"


def _hop(prev: object, obj: object, log_content: bool) -> list[str]:
    """Steps for ``prev`` holding ``obj`` when no collapsed form applies."""
    name = label(obj)
    try:
        if is_a(prev, dict):
            for key, value in list(prev.items()):
                if value is obj:
                    return [f"dict[{redact_key(key, log_content)}]", name]
            return [f"{name} (dict key)"]
        if is_a(prev, contextvars.Context):
            for var, value in list(prev.items()):
                if value is obj:
                    return [f"contextvar {var.name}", name]
        if is_any(prev, (*_GENERATORS, types.FrameType)):
            local = _local_of(prev, obj)
            if local:
                return [f"local {local}", name]
        if is_a(prev, types.CellType):
            return [name]
        if not is_any(prev, _SEQUENCES) and not is_a(prev, type):
            attr = _attr_of(prev, obj)
            if attr:
                return [f"{name} {attr}"]
    except Exception:  # a container changing under us: fall back to the type
        return [name]
    return [name]


def namespace(obj: object) -> object:
    """The ``__dict__`` of a module, class or instance (None when it has none)."""
    if is_a(obj, type):  # ``cls.__dict__`` is a proxy; the GC sees the dict behind it
        proxy = obj.__dict__
        return next((d for d in gc.get_referents(obj)
                     if is_a(d, dict) and d.keys() == proxy.keys()), None)
    try:
        return object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return None


def _key_of(names: dict[Any, Any], value: object, log_content: bool) -> str:
    """The attribute name under which ``value`` sits (names are code, so shown as they are)."""
    for key, candidate in list(names.items()):
        if candidate is value:
            return key if is_a(key, str) else redact_key(key, log_content)
    return "?"


def _freevar(function: types.FunctionType, cell: object) -> str:
    closure = function.__closure__ or ()
    for index, candidate in enumerate(closure):
        if candidate is cell and index < len(function.__code__.co_freevars):
            return function.__code__.co_freevars[index]
    return "?"


def _local_of(holder: object, obj: object) -> str:
    frame = holder if is_a(holder, types.FrameType) else (
        getattr(holder, "ag_frame", None) or getattr(holder, "cr_frame", None)
        or getattr(holder, "gi_frame", None))
    if frame is None:
        return ""
    for name, value in list(frame.f_locals.items()):
        if value is obj:
            return str(name)
    return ""


def _attr_of(holder: object, obj: object) -> str:
    names = namespace(holder)
    if is_a(names, dict):
        for key, value in list(names.items()):
            if value is obj:
                return str(key)
    for cls in type(holder).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for slot in (slots,) if is_a(slots, str) else slots:
            descriptor = cls.__dict__.get(slot)
            try:  # the slot's descriptor, not getattr(): that could reach a __getattr__
                value = descriptor.__get__(holder, cls) if descriptor is not None else None
            except AttributeError:
                continue
            if value is obj:
                return str(slot)
    return ""
