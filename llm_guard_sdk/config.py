"""Settings for the guard, from keyword arguments or ``LLM_GUARD_*`` environment variables.

The module is deliberately strict. A memory guard that quietly falls back to a default
after a typo (``LLM_GUARD_WARN_AT=O.75``, ``LLM_GUARD_WARNAT=0.75``) gives a false sense
of safety and only reveals the mistake when the kernel kills the process. So every setting
is checked once, at start-up, by the same code whether it came from keyword arguments or
the environment, and every failure names the setting, the offending value and the accepted
form, so the fix is obvious from the first log line.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from fractions import Fraction
from itertools import pairwise
from types import MappingProxyType

from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.monitors.base import SOURCE_NAMES

__all__ = ["GuardConfig", "parse_size"]

_PREFIX = "LLM_GUARD_"
# Read by other parts of the SDK (demo apps, tiny-model cache, test engines, test suite): not
# guard settings, but they must not trip the unknown-variable check.
_FOREIGN_VARS = frozenset({"LLM_GUARD_CACHE_DIR", "LLM_GUARD_ENGINE_TMPDIR"})
_FOREIGN_PREFIXES = ("LLM_GUARD_DEMO_", "LLM_GUARD_TEST_")
_ENV_NAME_EXCEPTIONS = MappingProxyType({"snapshot_ring_size": "LLM_GUARD_SNAPSHOT_RING"})
_THRESHOLDS = ("warn_at", "evict_at", "shed_at")
_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off"})
_ROUTE_RE = re.compile(r"/[A-Za-z0-9._~/-]*")
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)", re.ASCII | re.IGNORECASE)
_UNITS = MappingProxyType(
    {"b": 1}
    | {u + "b": 1000**p for p, u in enumerate("kmgt", start=1)}
    | {u + "ib": 1024**p for p, u in enumerate("kmgt", start=1)}
    | {u: 1024**p for p, u in enumerate("kmgt", start=1)}
)
_SIZE_FORM = "a size > 0: bytes, or a number with a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"


def parse_size(text: str | int) -> int:
    """Turn ``"512MiB"``, ``"1.5 GiB"``, ``"2G"`` or ``1048576`` into a number of bytes.

    Limits are written by humans in deployment files, so units are case-insensitive:
    ``KB``..``TB`` are powers of 1000 (as disk vendors use them), ``KiB``..``TiB`` and the
    bare ``K``/``M``/``G``/``T`` (as Kubernetes and Docker use them) are powers of 1024.
    Fractions are rounded down to whole bytes.

    Args:
        text: A positive int of bytes, or a string as described above.

    Raises:
        ValueError: The input is not a positive size; the caller names the setting.

    """
    error = ValueError(f"invalid size {text!r}: expected {_SIZE_FORM}")
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


# Field checks take the raw value and return it normalised, or raise ValueError/TypeError;
# ``__post_init__`` turns that into a ConfigError naming the field.
_Check = Callable[[object], object]


def _number(ok: Callable[[float], bool], *, integer: bool = False, none: bool = False) -> _Check:
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


_FRACTION = _number(lambda x: 0 < x <= 1)
_POSITIVE = _number(lambda x: x > 0)
_NON_NEGATIVE = _number(lambda x: x >= 0)
_COUNT = _number(lambda x: x >= 1, integer=True)


def _size(value: object) -> int:
    if not isinstance(value, int | str):
        raise TypeError(value)
    return parse_size(value)


def _limit(value: object) -> object:
    # 0 reads naturally as "no limit" in an env file, so it maps to None as empty does.
    if value is None or (not isinstance(value, bool) and value == 0):
        return None
    return _POSITIVE(value)


def _token(value: object) -> str | None:
    if value is None or value == "":
        return None
    # Printable ASCII without spaces survives headers, query strings and shell quoting.
    if isinstance(value, str) and len(value) >= 8 and all("!" <= c <= "~" for c in value):
        return value
    raise ValueError("bad token")


def _sources(value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise TypeError(value)
    names = tuple(i.strip().lower() for i in items)
    if not names or len(set(names)) != len(names) or not set(names) <= set(SOURCE_NAMES):
        raise ValueError(value)
    return names


def _paths(value: object) -> tuple[str, ...]:
    items = [i for i in value.split(",") if i.strip()] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise TypeError(value)
    return tuple(_route(i.strip()) for i in items)


def _route(value: object) -> str:
    if isinstance(value, str) and _ROUTE_RE.fullmatch(value) and not value.endswith("/"):
        return value
    raise ValueError(value)


def _flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise TypeError(value)


_BOOL = "expected a boolean: 1/0, true/false, yes/no or on/off"
_NO_LIMIT = "expected seconds > 0, or 0/empty for no limit, e.g. "
# field -> (check, accepted form). ``{warn_at}``-style placeholders become the name the
# user actually wrote (field name or env var) when the message is rendered.
_RULES: Mapping[str, tuple[_Check, str]] = MappingProxyType({
    "memory_limit": (lambda v: None if v is None or v == "" else _size(v),
                      f"expected {_SIZE_FORM}, e.g. 512MiB or 2GiB"),
    "warn_at": (_FRACTION, "expected a fraction in (0, 1], e.g. 0.75"),
    "evict_at": (_FRACTION, "expected a fraction in (0, 1], e.g. 0.85"),
    "shed_at": (_FRACTION, "expected a fraction in (0, 1], e.g. 0.92"),
    "hysteresis": (_NON_NEGATIVE, "expected a fraction >= 0 and below {warn_at}, e.g. 0.05"),
    "sample_interval": (_POSITIVE, "expected seconds > 0, e.g. 0.25"),
    "idle_timeout": (_POSITIVE, "expected seconds > 0, e.g. 300"),
    "min_session_age": (_NON_NEGATIVE, "expected seconds >= 0, e.g. 30"),
    "max_sessions": (_COUNT, "expected an integer >= 1, e.g. 10000"),
    "status_token": (_token, "expected >= 8 printable ASCII characters without spaces"),
    "retry_after": (_number(lambda x: x >= 0, integer=True), "expected whole seconds >= 0, e.g. 5"),
    "chunk_timeout": (_limit, _NO_LIMIT + "30"),
    "stream_timeout": (_limit, _NO_LIMIT + "600"),
    "max_evictions_per_tick": (_COUNT, "expected an integer >= 1, e.g. 50"),
    "snapshot_ring_size": (_COUNT, "expected an integer >= 1, e.g. 32"),
    "sources": (_sources, "expected distinct comma-separated items out of process, cgroup, "
                "host, e.g. process,cgroup"),
    "route_prefix": (_route, "expected a path starting but not ending with '/', of "
                     "A-Z a-z 0-9 . _ ~ / -, e.g. /llm-guard"),
    "exempt_paths": (_paths, "expected comma-separated path prefixes, each starting but not "
                     "ending with '/', e.g. /healthz,/metrics"),
    "trim_heap": (_flag, _BOOL),
    "size_budget_ms": (_POSITIVE, "expected milliseconds > 0, e.g. 2.0"),
    "close_grace": (_NON_NEGATIVE, "expected seconds >= 0, e.g. 2"),
    "max_waiting_requests": (_number(lambda x: x >= 1, integer=True, none=True),
                             "expected an integer >= 1, or empty for no limit, e.g. 100"),
    "leak_grace": (_NON_NEGATIVE, "expected seconds >= 0, e.g. 5"),
    "max_message_bytes": (_size, f"expected {_SIZE_FORM}, e.g. 1MiB"),
    "log_content": (_flag, _BOOL),
    "leaks": (_flag, _BOOL),
})


class _FieldError(ConfigError):
    """One invalid setting, kept in parts so ``from_env`` can re-word it with env names."""

    def __init__(self, field: str, value: object, accepted: str | None = None) -> None:
        self.field, self.value = field, value
        self.accepted = _RULES[field][1] if accepted is None else accepted
        super().__init__(self.render({}, {}))

    def render(self, names: Mapping[str, str], raw: Mapping[str, str]) -> str:
        """Word the error with ``names`` (field -> label) and the ``raw`` env strings."""
        value = raw.get(self.field, self.value)
        shown = repr(value)
        if self.field == "status_token" and isinstance(value, str):
            shown = f"<hidden, {len(value)} chars>"  # never echo a secret, even a bad one
        labels = {f: names.get(f, f) for f in _THRESHOLDS}
        accepted = self.accepted.format(**labels)
        return f"{names.get(self.field, self.field)}={shown} is invalid: {accepted}"


def _from_text(field: str, kind: str, text: str) -> object:
    """Convert an env string to the field's type; the field's check does the rest."""
    try:
        if kind == "bool" and text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        if kind == "bool":
            raise ValueError(text)
        if field not in ("memory_limit", "max_message_bytes"):  # those take size strings
            if kind.startswith("int"):
                return int(text)
            if kind.startswith("float"):
                return float(text)
    except ValueError:
        raise _FieldError(field, text) from None
    return text


@dataclass(frozen=True, slots=True)
class GuardConfig:
    """All guard settings, validated on construction so a bad deploy fails before traffic.

    Build it with keyword arguments or with :meth:`from_env`; both run the same checks.
    Thresholds are fractions of the memory limit. ``memory_limit`` and
    ``max_message_bytes`` also take size strings ("512MiB"), ``sources`` a list or a
    comma-separated string; they are stored as int and tuple.
    """

    memory_limit: int | None = None
    warn_at: float = 0.75
    evict_at: float = 0.85
    shed_at: float = 0.92
    hysteresis: float = 0.05
    sample_interval: float = 0.25
    idle_timeout: float = 300.0
    min_session_age: float = 30.0
    max_sessions: int = 10000
    status_token: str | None = field(default=None, repr=False)  # keep it out of logs
    retry_after: int = 5
    chunk_timeout: float | None = None
    stream_timeout: float | None = None
    max_evictions_per_tick: int = 50
    snapshot_ring_size: int = 32
    sources: tuple[str, ...] = SOURCE_NAMES
    route_prefix: str = "/llm-guard"
    exempt_paths: tuple[str, ...] = ()
    trim_heap: bool = True
    size_budget_ms: float = 2.0
    close_grace: float = 2.0
    max_waiting_requests: int | None = None
    leak_grace: float = 5.0
    max_message_bytes: int = 1048576
    log_content: bool = False
    leaks: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            try:
                object.__setattr__(self, f.name, _RULES[f.name][0](value))
            except (ValueError, TypeError, OverflowError):
                raise _FieldError(f.name, value) from None
        self._check_order()
        if self.hysteresis >= self.warn_at:
            accepted = f"expected a fraction >= 0 and below {{warn_at}} ({self.warn_at}), e.g. 0.05"
            raise _FieldError("hysteresis", self.hysteresis, accepted)

    def _check_order(self) -> None:
        """Reject thresholds that do not increase strictly, blaming the likely culprit."""
        values = {name: getattr(self, name) for name in _THRESHOLDS}
        defaults = {f.name: f.default for f in fields(self)}
        for low, high in pairwise(_THRESHOLDS):
            if values[low] < values[high]:
                continue
            # Blame the one the user changed; when both changed, the higher one.
            only_low = values[low] != defaults[low] and values[high] == defaults[high]
            blamed = low if only_low else high
            order = " < ".join(f"{{{name}}} ({value})" for name, value in values.items())
            accepted = f"thresholds must increase strictly: {order}, each in (0, 1]"
            raise _FieldError(blamed, values[blamed], accepted)

    @classmethod
    def env_names(cls) -> dict[str, str]:
        """Map each field to its environment variable, for docs and error messages."""
        return {f.name: _ENV_NAME_EXCEPTIONS.get(f.name, _PREFIX + f.name.upper())
                for f in fields(cls)}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> GuardConfig:
        """Build the config from ``LLM_GUARD_*`` variables, explicit ``overrides`` winning.

        Unknown ``LLM_GUARD_*`` variables are rejected because a misspelt one would
        otherwise be ignored silently. Empty values mean "unset": the default applies.

        Args:
            environ: Where to read variables; ``os.environ`` when None.
            **overrides: Field values that take precedence over the environment.

        Raises:
            ConfigError: A variable or override is unknown or invalid; values read from
                the environment are reported under their env var name.

        """
        env = os.environ if environ is None else environ
        names = cls.env_names()
        valid = set(names.values())
        allowed = valid | _FOREIGN_VARS
        if unknown := sorted(k for k in env if k.startswith(_PREFIX) and k not in allowed
                             and not k.startswith(_FOREIGN_PREFIXES)):
            close = difflib.get_close_matches(unknown[0], valid, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ConfigError(f"unknown variable {', '.join(unknown)}{hint}; "
                              f"valid variables are: {', '.join(sorted(valid))}")
        if bad := sorted(set(overrides) - set(names)):
            raise ConfigError(f"unknown setting {', '.join(bad)}; "
                              f"valid settings are: {', '.join(names)}")
        raw = {f: env[n].strip() for f, n in names.items()
               if f not in overrides and env.get(n, "").strip()}
        kinds = {f.name: str(f.type) for f in fields(cls)}
        try:
            values = {f: _from_text(f, kinds[f], text) for f, text in raw.items()}
            return cls(**values, **overrides)  # type: ignore[arg-type]
        except _FieldError as exc:
            labels = {f: n for f, n in names.items() if f not in overrides}
            raise ConfigError(exc.render(labels, raw)) from None

    def describe(self) -> dict[str, object]:
        """Return the settings as JSON-safe values, token hidden, for status pages and docs."""
        out: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["sources"] = list(self.sources)
        out["exempt_paths"] = list(self.exempt_paths)
        out["status_token"] = None if self.status_token is None else "***"
        return out
