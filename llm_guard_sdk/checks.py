"""The field checks of the settings classes: each takes a raw value and returns it normalised.

A check raises ValueError or TypeError for a bad value; :class:`~llm_guard_sdk.settings.Settings`
turns that into an error naming the setting and its accepted form, so checks stay one-liners.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from llm_guard_sdk.quantities import parse_size

_ROUTE_RE = re.compile(r"/[A-Za-z0-9._~/-]*")
BOOL_FORM = "expected a boolean: 1/0, true/false, yes/no or on/off"


# -- field checks: take the raw value, return it normalised, or raise ValueError/TypeError ------

Check = Callable[[object], object]


def number(ok: Callable[[float], bool], *, integer: bool = False, none: bool = False) -> Check:
    """Build a numeric check; bool is refused because ``True`` meaning 1 is always a mistake."""

    def check(value: object) -> object:
        if none and value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int if integer else int | float):
            raise TypeError(value)
        if not ok(value) or not (integer or math.isfinite(value)):
            raise ValueError(value)
        return value if integer else float(value)

    return check


FRACTION = number(lambda x: 0 < x <= 1)
POSITIVE = number(lambda x: x > 0)
NON_NEGATIVE = number(lambda x: x >= 0)
COUNT = number(lambda x: x >= 1, integer=True)


def size(value: object) -> int:
    """A size in bytes: a positive int or a string such as ``"512MiB"``."""
    if not isinstance(value, int | str):
        raise TypeError(value)
    return parse_size(value)


def optional_size(value: object) -> int | None:
    """:func:`size`, or None for None/empty."""
    return None if value is None or value == "" else size(value)


def limit(value: object) -> object:
    """Seconds > 0, or None; 0 reads naturally as "no limit" in an env file, as empty does."""
    if value is None or (not isinstance(value, bool) and value == 0):
        return None
    return POSITIVE(value)


def token(value: object) -> str | None:
    """A secret of >= 8 printable ASCII characters without spaces, or None for None/empty."""
    if value is None or value == "":
        return None
    # Printable ASCII without spaces survives headers, query strings and shell quoting.
    if isinstance(value, str) and len(value) >= 8 and all("!" <= c <= "~" for c in value):
        return value
    raise ValueError("bad token")


def choices(allowed: tuple[str, ...]) -> Check:
    """Build a check for distinct names out of ``allowed``: a list or a comma-separated string."""

    def check(value: object) -> tuple[str, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise TypeError(value)
        names = tuple(i.strip().lower() for i in items)
        if not names or len(set(names)) != len(names) or not set(names) <= set(allowed):
            raise ValueError(value)
        return names

    return check


def route(value: object) -> str:
    """A URL path starting but not ending with ``/``."""
    if isinstance(value, str) and _ROUTE_RE.fullmatch(value) and not value.endswith("/"):
        return value
    raise ValueError(value)


def paths(value: object) -> tuple[str, ...]:
    """Route prefixes, a list or comma-separated :func:`route` values; ``/x*``: a string prefix."""
    items = [i for i in value.split(",") if i.strip()] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise TypeError(value)
    return tuple(route(i[:-1]) + "*" if i.endswith("*") else route(i)
                 for i in map(str.strip, items))


def one_of(allowed: tuple[str, ...]) -> Check:
    """Build a check for one name out of ``allowed`` (case-insensitive)."""

    def check(value: object) -> str:
        if isinstance(value, str) and (name := value.strip().lower()) in allowed:
            return name
        raise ValueError(value)

    return check


def flag(value: object) -> bool:
    """A real bool (env strings are converted before the check)."""
    if isinstance(value, bool):
        return value
    raise TypeError(value)


# -- tenants (llm_guard_sdk.tenants) ------------------------------------------------------------

TENANT_KEY_MAX = 64
"""Longest tenant key kept; a longer header value maps to the default tenant."""
_HEADER_NAME_RE = re.compile(r"[a-z0-9!#$%&'*+.^_`|~-]+")
# One C-level match per request (the request path): printable ASCII without spaces, 1-64 long.
_KEY_BYTES_RE = re.compile(rb"[\x21-\x7e]{1,%d}" % TENANT_KEY_MAX)
_KEY_TEXT_RE = re.compile(_KEY_BYTES_RE.pattern.decode())


def is_tenant_key(value: bytes | str) -> bool:
    """1-64 printable ASCII characters without spaces: safe in logs, status and metrics."""
    pattern = _KEY_TEXT_RE if isinstance(value, str) else _KEY_BYTES_RE
    return pattern.fullmatch(value) is not None  # type: ignore[arg-type]


def tenant_key(value: object) -> str:
    """A tenant name as :func:`is_tenant_key` accepts it."""
    if isinstance(value, str) and is_tenant_key(value):
        return value
    raise ValueError(value)


def header_name(value: object) -> str | None:
    """An HTTP header name (an RFC 9110 token), lower-cased as ASGI gives it; None for empty."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and _HEADER_NAME_RE.fullmatch(value.strip().lower()):
        return value.strip().lower()
    raise ValueError(value)


def optional_count(value: object) -> int | None:
    """An integer >= 1, or None for None/empty/0 (no cap)."""
    if value is None or value == "" or (not isinstance(value, bool) and value == 0):
        return None
    checked = COUNT(value)
    if not isinstance(checked, int):
        raise TypeError(value)
    return checked


def tenant_priorities(names: tuple[str, ...]) -> Check:
    """Build a check for ``tenant=class`` pairs (a mapping, or ``"a=high,b=low"``).

    Returns sorted ``"tenant=class"`` items (hashable and JSON-safe, as settings need); a class
    must be one of ``names``, a tenant a valid :func:`tenant_key`, each tenant named once.
    """

    def check(value: object) -> tuple[str, ...]:
        if value is None or value == "":
            return ()
        if isinstance(value, str):
            items = [item.rpartition("=") for item in value.split(",") if item.strip()]
            if any(not sep for _, sep, _ in items):
                raise ValueError(value)
            pairs = [(k.strip(), v.strip().lower()) for k, _, v in items]
        elif isinstance(value, dict):
            pairs = list(value.items())
        elif isinstance(value, tuple | list):  # ("a=high", ...), as this check returns them
            return check(",".join(value))
        else:
            raise TypeError(value)
        keys = [tenant_key(k) for k, _ in pairs]
        classes = [c.strip().lower() if isinstance(c, str) else c for _, c in pairs]
        if len(set(keys)) != len(keys) or not all(c in names for c in classes):
            raise ValueError(value)
        return tuple(sorted(f"{k}={c}" for k, c in zip(keys, classes, strict=True)))

    return check
