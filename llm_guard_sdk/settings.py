"""Strict settings from keyword arguments or environment variables, shared by every settings class.

A memory guard that quietly falls back to a default after a typo (``LLM_GUARD_WARN_AT=O.75``,
``LLM_GUARD_WARNAT=0.75``) gives a false sense of safety and only reveals the mistake when the
kernel kills the process. So every setting is checked once, at start-up, by the same code whether
it came from keyword arguments or the environment, and every failure names the setting (as the
user wrote it: field or variable), the offending value and the accepted form.

A settings class is a frozen dataclass deriving from :class:`Settings` with one :class:`Rule`
per field in ``RULES``; ``GuardConfig`` is one, and extensions define their own the same way::

    @dataclass(frozen=True, slots=True)
    class LeakSettings(Settings):
        ENV_PREFIX: ClassVar[str] = "LLM_GUARD_LEAK_"
        RULES: ClassVar[Mapping[str, Rule]] = {"grace": Rule(NON_NEGATIVE, "expected seconds")}
        grace: float = 5.0
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from fractions import Fraction
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from llm_guard_sdk.errors import ConfigError

S = TypeVar("S", bound="Settings")

_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})
_ROUTE_RE = re.compile(r"/[A-Za-z0-9._~/-]*")
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)", re.ASCII | re.IGNORECASE)
_UNITS = MappingProxyType(
    {"b": 1}
    | {u + "b": 1000**p for p, u in enumerate("kmgt", start=1)}
    | {u + "ib": 1024**p for p, u in enumerate("kmgt", start=1)}
    | {u: 1024**p for p, u in enumerate("kmgt", start=1)}
)
SIZE_FORM = "a size > 0: bytes, or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
BOOL_FORM = "expected a boolean: 1/0, true/false, yes/no or on/off"


def parse_size(text: str | int) -> int:
    """Turn ``"512MiB"``, ``"1.5 GiB"``, ``"2G"`` or ``1048576`` into a number of bytes.

    Limits are written by humans in deployment files, so units are case-insensitive:
    ``KB``..``TB`` are powers of 1000 (as disk vendors use them), ``KiB``..``TiB`` and the
    bare ``K``/``M``/``G``/``T`` (as Kubernetes and Docker use them) are powers of 1024.
    Fractions are rounded down to whole bytes. Raises ValueError for anything but a positive
    size; the caller names the setting.
    """
    error = ValueError(f"invalid size {text!r}: expected {SIZE_FORM}")
    # bool is an int subclass; ``True`` as "1 byte" is never what anyone meant.
    if isinstance(text, int) and not isinstance(text, bool):
        if text > 0:
            return text
        raise error
    match = _SIZE_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    factor = _UNITS.get(match[2].lower() or "b") if match else None
    # A unitless number is a byte count, and fractional bytes are surely a typo.
    if match is None or factor is None or (not match[2] and "." in match[1]):
        raise error
    size = int(Fraction(match[1]) * factor)  # exact, non-negative, so int() rounds down
    if size <= 0:
        raise error
    return size


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


def flag(value: object) -> bool:
    """A real bool (env strings are converted before the check)."""
    if isinstance(value, bool):
        return value
    raise TypeError(value)


@dataclass(frozen=True, slots=True)
class Rule:
    """How one field is checked and described.

    Attributes:
        check: Normalises the value or raises ValueError/TypeError.
        accepted: The accepted form, for the error message; ``{field}`` placeholders become the
            name the user wrote for that field (field name or env var).
        text: The env string goes to ``check`` as is (sizes), not converted to int/float first.
        secret: Never echo the value, even a bad one, and hide it in :meth:`Settings.describe`.
    """

    check: Check
    accepted: str
    text: bool = False
    secret: bool = False


class _Labels(dict[str, str]):
    def __missing__(self, key: str) -> str:  # a field the user did not name: its field name
        return key


class FieldError(ConfigError):
    """One invalid setting, kept in parts so ``from_env`` can re-word it with env names."""

    def __init__(self, field: str, value: object, accepted: str, *, secret: bool = False) -> None:
        self.field, self.value, self.accepted, self.secret = field, value, accepted, secret
        super().__init__(self.render({}, {}))

    def render(self, names: Mapping[str, str], raw: Mapping[str, str]) -> str:
        """Word the error with ``names`` (field -> label) and the ``raw`` env strings."""
        value = raw.get(self.field, self.value)
        shown = repr(value)
        if self.secret and isinstance(value, str):
            shown = f"<hidden, {len(value)} chars>"
        accepted = self.accepted.format_map(_Labels(names))
        return f"{names.get(self.field, self.field)}={shown} is invalid: {accepted}"


class Settings:
    """Base of the settings dataclasses: validation, env parsing and error wording.

    Subclasses are frozen dataclasses that set the class variables below and may override
    :meth:`validate` for checks across fields.
    """

    __slots__ = ()
    ENV_PREFIX: ClassVar[str] = "LLM_GUARD_"
    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({})
    ENV_NAME_EXCEPTIONS: ClassVar[Mapping[str, str]] = MappingProxyType({})
    # Variables under ENV_PREFIX read by other parts, so the unknown-variable check spares them.
    FOREIGN_VARS: ClassVar[frozenset[str]] = frozenset()
    FOREIGN_PREFIXES: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            rule = self.RULES[f.name]
            value = getattr(self, f.name)
            try:
                object.__setattr__(self, f.name, rule.check(value))
            except (ValueError, TypeError, OverflowError):
                raise self.field_error(f.name, value) from None
        self.validate()

    def validate(self) -> None:
        """Checks across fields, after each field passed its own; raise :meth:`field_error`."""

    @classmethod
    def field_error(cls, field: str, value: object, accepted: str | None = None) -> FieldError:
        """The error for ``field``, with its rule's accepted form unless ``accepted`` is given."""
        rule = cls.RULES[field]
        return FieldError(field, value, rule.accepted if accepted is None else accepted,
                          secret=rule.secret)

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """Map each field to its environment variable, for docs and error messages."""
        return {f.name: cls.ENV_NAME_EXCEPTIONS.get(f.name, cls.ENV_PREFIX + f.name.upper())
                for f in fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None, **overrides: object) -> S:
        """Build the settings from ``environ`` (``os.environ``), explicit ``overrides`` winning.

        Unknown variables under ``ENV_PREFIX`` are rejected because a misspelt one would
        otherwise be ignored silently. Empty values mean "unset": the default applies. Raises
        ConfigError naming the variable (or override) and its value.
        """
        env = os.environ if environ is None else environ
        names = cls.env_names()
        valid = set(names.values())
        allowed = valid | cls.FOREIGN_VARS
        if unknown := sorted(k for k in env if k.startswith(cls.ENV_PREFIX) and k not in allowed
                             and not k.startswith(cls.FOREIGN_PREFIXES)):
            close = difflib.get_close_matches(unknown[0], valid, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"unknown variable {', '.join(unknown)}{hint}; "
                              f"valid variables are: {', '.join(sorted(valid))}")
        if bad := sorted(set(overrides) - set(names)):
            raise ConfigError(f"unknown setting {', '.join(bad)}; "
                              f"valid settings are: {', '.join(names)}")
        raw = {f: env[n].strip() for f, n in names.items()
               if f not in overrides and env.get(n, "").strip()}
        kinds = {f.name: str(f.type) for f in fields(cls)}  # type: ignore[arg-type]
        try:
            values = {f: cls._from_text(f, kinds[f], text) for f, text in raw.items()}
            return cls(**values, **overrides)
        except FieldError as exc:
            labels = {f: n for f, n in names.items() if f not in overrides}
            raise ConfigError(exc.render(labels, raw)) from None

    @classmethod
    def _from_text(cls, field: str, kind: str, text: str) -> object:
        """Convert an env string to the field's type; the field's check does the rest."""
        try:
            if kind == "bool" and text.lower() in _TRUE | _FALSE:
                return text.lower() in _TRUE
            if kind == "bool":
                raise ValueError(text)
            if not cls.RULES[field].text:
                if kind.startswith("int"):
                    return int(text)
                if kind.startswith("float"):
                    return float(text)
        except ValueError:
            raise cls.field_error(field, text) from None
        return text

    def describe(self) -> dict[str, object]:
        """The settings as JSON-safe values, secrets hidden, for status pages and docs."""
        out: dict[str, object] = {}
        for f in fields(self):  # type: ignore[arg-type]
            value: Any = getattr(self, f.name)
            if self.RULES[f.name].secret:
                value = None if value is None else "***"
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out
