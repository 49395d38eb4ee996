"""Deep size of an object graph, walked a few objects at a time so the event loop never stalls.

Pympler's ``asizeof`` (and any recursive walker) sizes one object in a single call: a 50,000-
message history took 883 ms, all of it on the event loop. :class:`SizeWalk` keeps its work on an
explicit stack of iterators, so it can stop after any object and resume on the next tick, and it
samples large containers (every n-th item, scaled up) so one measurement stays a bounded amount of
work however big the container is; a result that used a sample says so (``estimated``).

What it follows: the items of ``dict``, ``list``, ``tuple``, ``set``, ``frozenset`` and
``deque``, an instance's ``__dict__`` and ``__slots__``. What it neither counts nor follows:
classes, modules and functions (shared by the whole program). What it cannot see: memory that
``sys.getsizeof`` does not report (a torch tensor's storage, GPU memory, buffers owned by C
extensions, memory-mapped files).
"""

from __future__ import annotations

import sys
import types
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice

SAMPLE = 1024
"""Containers with more items than this are sized from about this many, evenly spread."""

_SEQUENCES = (list, tuple, set, frozenset, deque)
_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, types.CodeType, types.FrameType)
_slot_names: weakref.WeakKeyDictionary[type, tuple[str, ...]] = weakref.WeakKeyDictionary()


def slot_names(cls: type) -> tuple[str, ...]:
    """Names of the ``__slots__`` declared anywhere in ``cls``'s MRO (cached per class)."""
    names = _slot_names.get(cls)
    if names is None:
        found: list[str] = []
        for klass in cls.__mro__:
            slots = klass.__dict__.get("__slots__", ())
            found.extend((slots,) if isinstance(slots, str) else slots)
        names = tuple(n for n in found if n not in ("__dict__", "__weakref__"))
        _slot_names[cls] = names
    return names


def _attributes(obj: object) -> list[object]:
    """An instance's ``__dict__`` and the values of its set slots."""
    found: list[object] = []
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        found.append(attrs)
    for name in slot_names(type(obj)):
        try:
            found.append(object.__getattribute__(obj, name))
        except AttributeError:  # an unset slot
            continue
    return found


def referents(obj: object, sample: int) -> tuple[Iterator[object], float] | None:
    """What ``obj`` holds, and how many items each yielded one stands for (> 1: sampled).

    None for leaves (str, bytes, numbers, ...) and for shared program objects.
    """
    if isinstance(obj, dict):
        n = len(obj)
        step = -(-n // sample) if n > sample else 1
        pairs = islice(obj.items(), 0, None, step)
        return chain.from_iterable(pairs), n / -(-n // step) if n else 1.0
    if isinstance(obj, _SEQUENCES):
        n = len(obj)
        step = -(-n // sample) if n > sample else 1
        return islice(obj, 0, None, step), n / -(-n // step) if n else 1.0
    if isinstance(obj, _SHARED):  # not counted either: closing a session frees none of them
        return None
    found = _attributes(obj)
    return (iter(found), 1.0) if found else None


class SizeWalk:
    """One deep-size measurement of ``roots``, run in slices by :meth:`run`.

    Attributes:
        total: Bytes counted so far (scaled up where a container was sampled).
        estimated: True once any container was sampled, or changed size while it was walked.
        visited: Objects sized so far.
    """

    __slots__ = ("_seen", "_stack", "estimated", "sample", "total", "visited")

    def __init__(self, roots: Iterable[object], *, sample: int = SAMPLE) -> None:
        if sample < 1:
            raise ValueError(f"sample must be >= 1, not {sample}")
        self.sample = sample
        self.total = 0.0
        self.estimated = False
        self.visited = 0
        self._seen: set[int] = set()
        self._stack: list[tuple[Iterator[object], float]] = [(iter(tuple(roots)), 1.0)]

    @property
    def done(self) -> bool:
        """True once every reachable object has been sized."""
        return not self._stack

    @property
    def size(self) -> int:
        """The measured (or estimated) size in bytes."""
        return round(self.total)

    def run(self, deadline: float, clock: Callable[[], float]) -> bool:
        """Size objects until the walk is done (True) or ``clock()`` reaches ``deadline``.

        Each step sizes at most one object and only pushes an iterator over what it holds, so
        the walk overshoots the deadline by one small object at most.
        """
        stack, seen, sample = self._stack, self._seen, self.sample
        while stack:
            iterator, weight = stack[-1]
            try:
                obj = next(iterator)
            except StopIteration:
                stack.pop()
                continue
            except RuntimeError:  # a dict or set changed size between two slices
                stack.pop()
                self.estimated = True
                continue
            if id(obj) not in seen and not isinstance(obj, _SHARED):
                seen.add(id(obj))
                self.visited += 1
                try:
                    size, held = sys.getsizeof(obj, 0), referents(obj, sample)
                except Exception:  # a broken __sizeof__ or proxy must not stop the measurement
                    size, held = 0, None
                self.total += weight * size
                if held is not None:
                    children, scale = held
                    if scale != 1.0:
                        self.estimated = True
                    stack.append((children, weight * scale))
            if clock() >= deadline:
                return not stack
        return True

    def finish(self) -> int:
        """Run to the end in one call (tests and tools, never on the event loop)."""
        self.run(float("inf"), lambda: 0.0)
        return self.size
