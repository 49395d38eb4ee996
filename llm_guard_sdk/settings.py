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
        RULES: ClassVar[Mapping[str, Rule]] = {"leak_grace": Rule(NON_NEGATIVE, "seconds >= 0")}
        WARN_UNKNOWN: ClassVar[bool] = False  # GuardConfig checks LLM_GUARD_* for everyone
        leak_grace: float = 5.0

Calling the class reads the environment for the fields not given (keyword arguments over the
environment over the defaults); ``Cls.defaults(**kwargs)`` ignores the environment. Each
instance remembers where every value came from (:meth:`Settings.provenance`: ``default``,
``environment`` or ``code``), so ``llm-guard config`` can say why a setting has its value.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, ClassVar, Literal, TypeVar

from llm_guard_sdk.checks import (
    BOOL_FORM,
    COUNT,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    Check,
    choices,
    flag,
    limit,
    number,
    one_of,
    optional_size,
    paths,
    route,
    size,
    token,
)
from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.quantities import SIZE_FORM, parse_size

# The checks and size parsing are re-exported: a settings class needs only this module.
__all__ = [
    "BOOL_FORM", "COUNT", "FRACTION", "NON_NEGATIVE", "POSITIVE", "SIZE_FORM", "Check",
    "FieldError", "Origin", "Rule", "Settings", "SettingsMeta", "choices", "flag", "limit",
    "number", "one_of", "optional_size", "parse_size", "paths", "route", "size", "token",
]

logger = logging.getLogger("llm_guard_sdk")

S = TypeVar("S", bound="Settings")

Origin = Literal["default", "environment", "code"]
"""Where a setting's value came from: its default, an environment variable, or the caller's
keyword arguments (code)."""

_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})


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


class SettingsMeta(type):
    """Makes ``Settings(...)`` follow the pydantic-settings convention.

    Keyword arguments override the environment, which overrides the defaults: calling the class
    is :meth:`Settings.from_env` with the arguments as overrides, so ``GuardConfig(memory_limit=
    "2Gi")`` keeps ``LLM_GUARD_STATUS_TOKEN`` from the deployment. A call that gives every field
    (``dataclasses.replace`` does) reads nothing from the environment.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        """Build from the arguments (positional ones in field order) over the environment."""
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        if len(args) > len(names):
            raise TypeError(f"{cls.__name__} takes at most {len(names)} positional arguments")
        for name, value in zip(names, args, strict=False):
            if name in kwargs:
                raise TypeError(f"{cls.__name__} got multiple values for argument {name!r}")
            kwargs[name] = value
        if set(names) <= kwargs.keys():
            built = super().__call__(**kwargs)
            built.record_origins(dict.fromkeys(names, "code"))
            return built
        return cls.from_env(None, **kwargs)  # type: ignore[attr-defined]


class Settings(metaclass=SettingsMeta):
    """Base of the settings dataclasses: validation, env parsing and error wording.

    Subclasses are frozen dataclasses that set the class variables below and may override
    :meth:`validate` for checks across fields. Three ways to build one, all equally strict:
    ``Cls(**kwargs)`` (keyword arguments over the environment over the defaults),
    ``Cls.from_env(environ, **overrides)`` (the same, from a given mapping) and
    ``Cls.defaults(**kwargs)`` (ignores the environment: for tests and for code that must not
    depend on where it runs).
    """

    # Not a dataclass field (not compared, not in ``fields()``): set once by the constructors.
    __slots__ = ("_origins",)
    _origins: Mapping[str, Origin]
    ENV_PREFIX: ClassVar[str] = "LLM_GUARD_"
    RULES: ClassVar[Mapping[str, Rule]] = MappingProxyType({})
    ENV_NAME_EXCEPTIONS: ClassVar[Mapping[str, str]] = MappingProxyType({})
    # Variables under ENV_PREFIX read by other parts, so the unknown-variable check spares them:
    # other settings classes' (suggested in did-you-mean hints), then anything else's.
    SIBLING_VARS: ClassVar[frozenset[str]] = frozenset()
    FOREIGN_VARS: ClassVar[frozenset[str]] = frozenset()
    FOREIGN_PREFIXES: ClassVar[tuple[str, ...]] = ()
    # False for a class that shares its prefix with another that checks for both (an
    # extension's settings under ``LLM_GUARD_``: GuardConfig knows their names).
    WARN_UNKNOWN: ClassVar[bool] = True

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
    def defaults(cls: type[S], **kwargs: object) -> S:
        """Build from ``kwargs`` and the defaults only, never reading the environment."""
        return cls.from_env({}, **kwargs)

    @classmethod
    def unknown_variables(cls, environ: Mapping[str, str]) -> list[str]:
        """Variables under ``ENV_PREFIX`` that no setting (nor a known other part) reads."""
        allowed = set(cls.env_names().values()) | cls.SIBLING_VARS | cls.FOREIGN_VARS
        return sorted(k for k in environ if k.startswith(cls.ENV_PREFIX) and k not in allowed
                      and not k.startswith(cls.FOREIGN_PREFIXES))

    @classmethod
    def warn_unknown(cls, environ: Mapping[str, str]) -> list[str]:
        """Log a WARNING per unknown variable, with a did-you-mean hint; return them.

        A warning, not an error: a variable left over from a newer release must not stop a
        rollback, and a misspelt one is still pointed out in the first lines of the log.
        """
        unknown = cls.unknown_variables(environ)
        candidates = sorted(set(cls.env_names().values()) | cls.SIBLING_VARS)
        for name in unknown:
            close = difflib.get_close_matches(name, candidates, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            logger.warning("llm-guard: ignoring unknown variable %s%s; valid variables are: %s",
                           name, hint, ", ".join(candidates))
        return unknown

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None, **overrides: object) -> S:
        """Build the settings from ``environ`` (``os.environ``), explicit ``overrides`` winning.

        Unknown variables under ``ENV_PREFIX`` are logged as warnings (:meth:`warn_unknown`).
        Empty values mean "unset": the default applies. Raises ConfigError naming the variable
        (or override) and its value.
        """
        env = os.environ if environ is None else environ
        names = cls.env_names()
        if cls.WARN_UNKNOWN:
            cls.warn_unknown(env)
        if bad := sorted(set(overrides) - set(names)):
            raise ConfigError(f"unknown setting {', '.join(bad)}; "
                              f"valid settings are: {', '.join(names)}")
        raw = {f: env[n].strip() for f, n in names.items()
               if f not in overrides and env.get(n, "").strip()}
        kinds = {f.name: str(f.type) for f in fields(cls)}  # type: ignore[arg-type]
        try:
            values = {f: cls._from_text(f, kinds[f], text) for f, text in raw.items()}
            built: S = type.__call__(cls, **values, **overrides)
        except FieldError as exc:
            # Name a setting as the user wrote it: a keyword argument by its field name, the
            # rest by their variables once the environment set any (else by field names).
            labels = {f: n for f, n in names.items() if f not in overrides} if raw else {}
            raise ConfigError(exc.render(labels, raw)) from None
        built.record_origins({f: "code" if f in overrides else "environment" if f in raw
                              else "default" for f in names})
        return built

    def record_origins(self, origins: Mapping[str, Origin]) -> None:
        """Remember where each value came from (the constructors call this once)."""
        object.__setattr__(self, "_origins", MappingProxyType(dict(origins)))

    def replace(self, *, origin: Origin = "code", **changes: Any) -> Any:
        """A copy with ``changes`` applied, validated, keeping the other values' origins.

        ``dataclasses.replace`` would report every value as ``code``; the changed ones here come
        from ``origin``.
        """
        copy = dataclasses.replace(self, **changes)  # type: ignore[type-var]
        copy.record_origins({**self.provenance(), **dict.fromkeys(changes, origin)})
        return copy

    def provenance(self) -> dict[str, Origin]:
        """Where each setting's value came from: ``default``, ``environment`` or ``code``.

        An instance built without the constructors (a copy, an unpickled one) reports ``code``:
        someone built it from values in code.
        """
        origins: Mapping[str, Origin] = getattr(self, "_origins", MappingProxyType({}))
        return {f.name: origins.get(f.name, "code") for f in fields(self)}  # type: ignore[arg-type]

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
