"""The breadth-first back-reference search: shortest chains, depth bound, its own containers.

Roots here are chosen objects (``is_root=lambda o: o is root``), so nothing depends on what
else the test process has imported; :func:`find_chain` is checked with a real module root.
Every assertion is on chains and counts, none on time.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest

from llm_guard_sdk.leaks import find_chain
from llm_guard_sdk.leaks.runtime.backrefs import MAX_REFERRERS_ARGS, shortest_chain

WIDE = MAX_REFERRERS_ARGS + 100  # a frontier this wide is found by one full pass


class Target:
    pass


class Holder:
    """An object with an instance ``__dict__``."""


class Owner:
    def __init__(self, value: object) -> None:
        self.value = value

    def method(self) -> None:
        pass


def closure_over(value: object) -> Callable[[], object]:
    def read() -> object:
        return value

    return read


def is_(root: object) -> Callable[[object], bool]:
    return lambda candidate: candidate is root


def essential(chain: list[Any] | None) -> list[Any] | None:
    """The chain without instance ``__dict__``s: since 3.11 an instance may keep its attribute
    values inline, and the GC then sees them held by the instance itself."""
    if chain is None:
        return None
    out: list[Any] = []
    for obj in chain:
        if not (out and type(obj) is dict and obj is getattr(out[-1], "__dict__", None)):
            out.append(obj)
    return out


def test_shortest_of_two_paths_through_an_instance_dict_and_a_dict() -> None:
    root, target = Holder(), Target()
    root.long = [[[target]]]  # type: ignore[attr-defined]
    root.short = {"key": target}  # type: ignore[attr-defined]
    chain = essential(shortest_chain(target, is_(root), max_depth=10).chain)
    assert chain == [root, root.short, target]  # type: ignore[attr-defined]


def test_chain_through_a_list() -> None:
    root, target = Holder(), Target()
    root.items = [1, target]  # type: ignore[attr-defined]
    chain = essential(shortest_chain(target, is_(root), max_depth=10).chain)
    assert chain == [root, root.items, target]  # type: ignore[attr-defined]


def test_chain_through_a_closure_cell() -> None:
    root, target = Holder(), Target()
    function = closure_over(target)
    root.callback = function  # type: ignore[attr-defined]
    chain = essential(shortest_chain(target, is_(root), max_depth=10).chain)
    assert function.__closure__ is not None
    (cell,) = function.__closure__
    assert chain == [root, function, function.__closure__, cell, target]


def test_chain_through_a_bound_method() -> None:
    root, target = Holder(), Target()
    owner = Owner(target)
    root.handler = owner.method  # type: ignore[attr-defined]
    chain = essential(shortest_chain(target, is_(root), max_depth=10).chain)
    assert chain is not None and len(chain) == 4
    assert type(chain[1]) is types.MethodType and chain[1].__self__ is owner
    assert [chain[0], *chain[2:]] == [root, owner, target]


def test_depth_bound_is_exact_and_unreachable_gives_none() -> None:
    root, target = Holder(), Target()
    root.nested = [[[target]]]  # type: ignore[attr-defined]
    found = shortest_chain(target, is_(root), max_depth=10).chain
    assert found is not None
    references = len(found) - 1  # 4, or 5 where the instance dict is a separate object
    del found
    short = shortest_chain(target, is_(root), max_depth=references - 1)
    assert short.chain is None and short.depth <= references - 1 and not short.gave_up
    assert shortest_chain(target, is_(root), max_depth=references).chain is not None
    nowhere = shortest_chain(target, is_(object()), max_depth=10)
    assert nowhere.chain is None and nowhere.depth <= 10


def test_own_containers_are_never_holders() -> None:
    """Only the real holders are visited: the search's frontier, argument tuple, candidate
    list and bookkeeping dicts are not, on the get_referrers path nor the full-scan path."""
    target = Target()
    box = [target]  # held by this frame only, which the search skips
    result = shortest_chain(target, is_(object()), max_depth=10)
    assert result.chain is None
    assert result.visited == 2  # target, box

    # a level of WIDE holders: the full-pass path (no closure over `target`: that adds a cell)
    boxes = [[each] for each in [target] * WIDE]
    result = shortest_chain(target, is_(object()), max_depth=10)
    assert result.chain is None
    assert result.visited == 1 + 1 + WIDE + 1  # target, box, the WIDE lists, boxes
    del box, boxes


def test_wide_frontier_still_finds_the_root() -> None:
    root, target = Holder(), Target()
    holders = [Owner(target) for _ in range(WIDE)]
    root.one = holders[WIDE // 2]  # type: ignore[attr-defined]
    chain = essential(shortest_chain(target, is_(root), max_depth=10).chain)
    assert chain == [root, holders[WIDE // 2], target]


def test_ignored_ids_are_not_followed() -> None:
    root, target = Holder(), Target()
    root.items = [target]  # type: ignore[attr-defined]
    ignored = root.items  # type: ignore[attr-defined]
    assert shortest_chain(target, is_(root), max_depth=10, ignore={id(ignored)}).chain is None


def test_deadline_in_the_past_gives_up_before_the_first_scan() -> None:
    result = shortest_chain(Target(), is_(object()), max_depth=10, deadline=0.0)
    assert result.gave_up and result.depth == 0 and result.chain is None


def test_bad_depth_is_refused() -> None:
    with pytest.raises(ValueError, match="max_depth must be at least 1"):
        shortest_chain(Target(), is_(object()), max_depth=0)


def test_find_chain_renders_each_hop_from_a_module(monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("fake_leaky_module")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    target = Target()
    cases: list[tuple[str, Any, str]] = [
        ("CALLBACK", closure_over(target), "function closure_over.<locals>.read CALLBACK -> "
                                           "closure value -> Target"),
        ("HANDLER", Owner(target).method, "method Owner.method HANDLER -> Owner -> Target value"),
        ("CACHE", {"sess-1": [target]}, "dict CACHE -> dict['sess-…'] -> list -> Target"),
    ]
    for name, holder, expected in cases:
        setattr(module, name, holder)
        del holder
        chain = find_chain(target)
        assert chain.status == "found"
        assert chain.text == f"module fake_leaky_module -> {expected}"
        delattr(module, name)
