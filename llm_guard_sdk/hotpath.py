"""The optional C hot path, or None where it was not built.

``llm_guard_sdk._hotpath`` (``_hotpath.c``) carries the per-chunk work of
:class:`~llm_guard_sdk.asgi.http.HttpConnection` (counting a body chunk on its way to the server)
and of :class:`~llm_guard_sdk.stream.GuardedStream` (counting a chunk on its way out of the
source) without a Python frame per chunk. The pure-Python code beside each is the reference and
runs wherever the extension is missing (no compiler at install time, another interpreter).
Both read :data:`native` when a connection or stream starts, so a test can swap it for None.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Protocol, overload

native: ModuleType | None
try:
    from llm_guard_sdk import _hotpath as native
except ImportError:  # not compiled: the pure-Python hot path
    native = None


def implementation() -> str:
    """``"c"`` when the compiled hot path is in use, else ``"python"`` (status, benchmarks)."""
    return "c" if native is not None else "python"


class Traffic(Protocol):
    """Chunks and bytes counted on the hot path (``session.out``, ``stream.traffic``)."""

    chunks: int
    bytes: int


class PyTraffic:
    """The pure-Python :class:`Traffic` (the compiled one keeps two C integers instead)."""

    __slots__ = ("bytes", "chunks")

    def __init__(self) -> None:
        self.chunks = 0
        self.bytes = 0


def new_traffic() -> Traffic:
    """A zeroed counter pair: compiled where built, so the hot path adds without an int object."""
    return native.Traffic() if native is not None else PyTraffic()


def compiled(traffic: Traffic) -> bool:
    """Whether the compiled hot path can count into ``traffic`` (it was made by it)."""
    return native is not None and type(traffic) is native.Traffic


class TrafficCounter:
    """One counter of an object's :class:`Traffic` pair, read and set as a plain int attribute.

    ``chunks_out = TrafficCounter("out", "chunks")`` on a class makes ``obj.chunks_out`` read and
    write ``obj.out.chunks``: the readers keep their attribute while the hot path counts into
    the pair (one descriptor instead of a property and setter per counter and class).
    """

    def __init__(self, pair: str, field: str) -> None:
        self.pair = pair
        self.field = field
        self.__doc__ = f"Traffic, kept in ``{pair}.{field}``."

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> TrafficCounter: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> int: ...

    def __get__(self, obj: object | None, owner: type[Any] | None = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self.pair), self.field)

    def __set__(self, obj: object, value: int) -> None:
        setattr(getattr(obj, self.pair), self.field, value)
