"""Sizes as people write them in deployment files: Kubernetes quantities and byte units.

A memory limit is usually copied from a Kubernetes manifest (``512Mi``, ``2Gi``, ``2G``) or a
size written with a unit (``512MiB``, ``2GB``). Both read the same here as where they came from:

- binary: ``Ki``, ``Mi``, ``Gi``, ``Ti``, ``Pi``, ``Ei`` (Kubernetes) and ``KiB`` .. ``EiB``
  are powers of 1024;
- decimal: ``k``/``K``, ``M``, ``G``, ``T``, ``P``, ``E`` (Kubernetes: ``2G`` is 2 * 10^9)
  and ``KB`` .. ``EB`` are powers of 1000;
- ``B`` or no unit: bytes.

The ``B``/``iB`` forms and the binary ``Ki``..``Ei`` forms are case-insensitive. A bare
lower-case ``m``, ``g``, ``t``, ``p`` or ``e`` is refused: Kubernetes reads ``512m`` as 0.512
*milli*-bytes while Docker reads it as 512 MiB, so whichever we chose, someone's limit would be
off by a factor of a billion.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType

__all__ = ["SIZE_FORM", "parse_size"]

_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([a-z]*)", re.ASCII | re.IGNORECASE)
_PREFIXES = "kmgtpe"
_DECIMAL_BARE: Mapping[str, int] = MappingProxyType(
    {"k": 1000, "K": 1000} | {u.upper(): 1000**p for p, u in enumerate(_PREFIXES, 1) if u != "k"})
_CASELESS: Mapping[str, int] = MappingProxyType(
    {"": 1, "b": 1}
    | {u + "b": 1000**p for p, u in enumerate(_PREFIXES, 1)}
    | {u + "i": 1024**p for p, u in enumerate(_PREFIXES, 1)}
    | {u + "ib": 1024**p for p, u in enumerate(_PREFIXES, 1)}
)
SIZE_FORM = ("a size: bytes, or a number with a unit: Ki, Mi, Gi, Ti (powers of 1024, also "
             "KiB, MiB, ...) or k, M, G, T (powers of 1000, also KB, MB, ...)")


def _factor(unit: str) -> int | None:
    if unit in _DECIMAL_BARE:
        return _DECIMAL_BARE[unit]
    if len(unit) == 1 and unit in _PREFIXES:
        return None  # lower-case m/g/t/...: ambiguous between Kubernetes and Docker
    return _CASELESS.get(unit.lower())


def parse_size(text: str | int) -> int:
    """Turn ``"512Mi"``, ``"2G"``, ``"1.5 GiB"`` or ``1048576`` into a number of bytes.

    Fractions are rounded down to whole bytes; a unitless number is a byte count and must be
    whole. Raises ValueError for anything but a positive size; the caller names the setting.
    """
    error = ValueError(f"invalid size {text!r}: expected {SIZE_FORM}")
    # bool is an int subclass; ``True`` as "1 byte" is never what anyone meant.
    if isinstance(text, int) and not isinstance(text, bool):
        if text > 0:
            return text
        raise error
    match = _SIZE_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    factor = _factor(match[2]) if match else None
    if match is not None and factor is None and match[2] in tuple(_PREFIXES):
        unit = match[2].upper()
        raise ValueError(f"invalid size {text!r}: lower-case {match[2]!r} is ambiguous (Docker "
                         "reads it as powers of 1024, Kubernetes as milli or not at all); write "
                         f"{match[1]}{unit}i for powers of 1024 or {match[1]}{unit} for 1000")
    # A unitless number is a byte count, and fractional bytes are surely a typo.
    if match is None or factor is None or (not match[2] and "." in match[1]):
        raise error
    size = int(Fraction(match[1]) * factor)  # exact, non-negative, so int() rounds down
    if size <= 0:
        raise error
    return size


def format_size(size: int) -> str:
    """``536870912`` -> ``"512Mi"``, ``1610612736`` -> ``"1.50Gi"``: short sizes for logs."""
    for power, unit in ((4, "Ti"), (3, "Gi"), (2, "Mi"), (1, "Ki")):
        if size >= 1024**power:
            whole, rest = divmod(size, 1024**power)
            return f"{whole}{unit}" if not rest else f"{size / 1024**power:.2f}{unit}"
    return f"{size}B"
