"""Instance counts of chosen types, for the marker's ``types=``/``repeat=`` check.

Counting walks ``gc.get_objects()`` (after a collection), so it runs twice per checked test
and only when ``types`` are given: after the warm-up run of the body, which fills first-call
caches (``re``, ``functools.lru_cache``, typing), and after the last run.
"""

from __future__ import annotations

import gc
from typing import Any

from llm_guard_sdk.leaks.runtime.introspect import class_name


def spec_name(spec: Any) -> str:
    """The display name of a ``types`` entry (a class or a type name)."""
    return spec if isinstance(spec, str) else class_name(spec)


def matches(obj: object, spec: Any) -> bool:
    """True when ``obj`` is an instance of the class, or its type has that (qualified) name."""
    cls = type(obj)  # never obj.__class__: a lazy proxy would evaluate itself
    if isinstance(spec, str):
        return cls.__name__ == spec or class_name(cls) == spec
    return issubclass(cls, spec)


def instances(specs: tuple[Any, ...]) -> dict[str, set[int]]:
    """Ids of the live GC-tracked instances of each spec, after a collection."""
    found: dict[str, set[int]] = {spec_name(s): set() for s in specs}
    gc.collect()
    for obj in gc.get_objects():
        for spec in specs:
            if matches(obj, spec):
                found[spec_name(spec)].add(id(obj))
    return found


def new_instance(spec: Any, before: set[int]) -> Any:
    """One live instance of ``spec`` that was not there ``before`` (None if none)."""
    return next((o for o in gc.get_objects() if matches(o, spec) and id(o) not in before), None)
