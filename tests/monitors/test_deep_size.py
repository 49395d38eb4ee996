"""SizeWalk: a deep size walked in slices, sampling large containers."""

from __future__ import annotations

import sys
from collections import deque

import pytest

from llm_guard_sdk.monitors.deep_size import SizeWalk, referents, slot_names


def exact(*roots: object) -> int:
    return SizeWalk(roots, sample=10**9).finish()


def test_counts_nested_builtins_once_each() -> None:
    text, raw = "x" * 10_000, b"z" * 5_000
    nested = {"k": [text, {"y": raw}, text]}
    size = exact(nested)
    assert size >= sys.getsizeof(text) + sys.getsizeof(raw)
    assert size < 2 * sys.getsizeof(text) + sys.getsizeof(raw)  # text counted once


def test_terminates_on_cycles() -> None:
    cyclic: list[object] = []
    cyclic.append(cyclic)
    assert exact(cyclic) == sys.getsizeof(cyclic)


class Slotted:
    __slots__ = ("payload", "unset")

    def __init__(self) -> None:
        self.payload = b"p" * 4000


class Plain:
    def __init__(self) -> None:
        self.payload = b"q" * 4000
        self.klass = Plain  # classes and modules are shared: never followed
        self.module = sys


def test_follows_slots_and_instance_dicts_not_shared_objects() -> None:
    assert slot_names(Slotted) == ("payload", "unset")
    assert exact(Slotted()) >= 4000
    size = exact(Plain())
    assert 4000 <= size < 4000 + 2000
    assert referents(Plain, 10) is None and referents(sys, 10) is None


def test_large_containers_are_sampled_and_marked_estimated() -> None:
    items = deque("v" * (i % 500) for i in range(20_000))
    walk = SizeWalk([items], sample=500)
    estimate = walk.finish()
    assert walk.estimated
    assert walk.visited < 600  # about the sample, not 20,000 objects
    assert abs(estimate - exact(items)) < 0.05 * exact(items)
    small = SizeWalk([list(range(100))], sample=500)
    small.finish()
    assert not small.estimated


def test_resumes_and_survives_a_dict_resized_between_slices() -> None:
    data = {i: str(i) for i in range(100)}
    walk = SizeWalk([data])
    ticks = iter(range(10**6))
    assert not walk.run(5, ticks.__next__)  # stopped after a few objects
    data.update({i: str(i) for i in range(100, 200)})  # the app keeps writing
    assert walk.run(float("inf"), lambda: 0.0)
    assert walk.done and walk.estimated  # cut short: said so


def test_rejects_a_bad_sample() -> None:
    with pytest.raises(ValueError, match="sample"):
        SizeWalk([], sample=0)
