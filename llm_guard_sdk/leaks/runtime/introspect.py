"""Looking at arbitrary objects without running their code: type tests and type names.

Leak forensics walk whatever the app left behind: lazy proxies, hostile ``__getattr__``,
broken ``__repr__``. Everything here reads the real type only.
"""

from __future__ import annotations

import types
from typing import TypeGuard, TypeVar

T = TypeVar("T")


def is_a(obj: object, cls: type[T]) -> TypeGuard[T]:
    """``isinstance`` that never asks the object.

    ``isinstance`` falls back to ``obj.__class__``, which lazy proxies (Django's
    ``SimpleLazyObject``) answer by evaluating themselves: compiling regexes, loading settings.
    Forensics walk arbitrary objects, so they must look at the real type only.
    """
    return issubclass(type(obj), cls)


def is_any(obj: object, classes: tuple[type, ...] | types.UnionType) -> bool:
    """:func:`is_a` for several classes."""
    return issubclass(type(obj), classes)


def class_name(cls: type) -> str:
    """``module.Qualname`` of a class; builtins without the module."""
    module = getattr(cls, "__module__", "builtins")
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


def type_name(obj: object) -> str:
    """``module.Qualname`` of ``obj``'s type; builtins without the module."""
    return class_name(type(obj))
