"""The quota document: observations plus what ``plan`` needs, as served and as saved.

One format for ``GET /llm-guard/quota``, :meth:`QuotaRecorder.save` and ``llm-guard plan
--from``, so a file saved on one host and the live route of another read the same way::

    {"version": 1, "target": "process", "limit_bytes": 4294967296, "evict_at": 0.85,
     "window_seconds": 10.0, "mean_session_seconds": 12.5,
     "observations": [{"qps": 3.2, "context_tokens": 812.0, "peak_process_bytes": ...}, ...],
     "fit": {"alpha": ..., "r_squared": ...} | null, "fit_error": "..." | null}

``fit`` is informative only: readers refit from ``observations``, the source of truth.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_guard_sdk.errors import ConfigError
from llm_guard_sdk.quota.model import TARGETS, Observation

VERSION = 1


@dataclass(frozen=True, slots=True)
class QuotaDocument:
    """Observations and the context to plan with them (limit, evict threshold, durations)."""

    observations: tuple[Observation, ...]
    target: str = "process"
    limit_bytes: int | None = None
    evict_at: float | None = None
    window_seconds: float | None = None
    mean_session_seconds: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Informative keys written with the document (the current fit), never read back."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON document."""
        return {
            "version": VERSION,
            "target": self.target,
            "limit_bytes": self.limit_bytes,
            "evict_at": self.evict_at,
            "window_seconds": self.window_seconds,
            "mean_session_seconds": self.mean_session_seconds,
            "observations": [o.to_dict() for o in self.observations],
            **self.extra,
        }

    @classmethod
    def from_dict(cls, data: object) -> QuotaDocument:
        """Parse a document; ValueError saying what is wrong with it."""
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object with an 'observations' list")
        if data.get("version", VERSION) != VERSION:
            raise ValueError(f"unsupported version {data.get('version')!r} (expected {VERSION})")
        rows = data.get("observations")
        if not isinstance(rows, list):
            raise ValueError("expected an 'observations' list")
        observations = []
        for index, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ValueError(f"observation {index} is not an object")
            try:
                observations.append(Observation.from_dict(row))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"observation {index}: {exc}") from None
        target = data.get("target", "process")
        if target not in TARGETS:
            raise ValueError(f"'target' must be one of {', '.join(TARGETS)}, got {target!r}")
        return cls(
            tuple(observations), target,
            limit_bytes=_optional(data, "limit_bytes", lambda v: v > 0, integer=True),
            evict_at=_optional(data, "evict_at", lambda v: 0 < v <= 1),
            window_seconds=_optional(data, "window_seconds", lambda v: v > 0),
            mean_session_seconds=_optional(data, "mean_session_seconds", lambda v: v >= 0),
        )


def _optional(data: Mapping[str, Any], key: str, ok: Any, *, integer: bool = False) -> Any:
    value = data.get(key)
    if value is None:
        return None
    kind = int if integer else int | float
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value) \
            or not ok(value):
        raise ValueError(f"{key!r} is invalid: {value!r}")
    return value if integer else float(value)


def read_document(path: str | os.PathLike[str]) -> QuotaDocument:
    """Load a saved document.

    Raises:
        ConfigError: The file cannot be read, is not JSON, or is not a quota document; the
            message names the file.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"quota file {os.fspath(path)!r} cannot be read: {exc}") from None
    try:
        return QuotaDocument.from_dict(json.loads(text))
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise ConfigError(f"quota file {os.fspath(path)!r} is not a valid quota document: "
                          f"{exc}") from None


def write_document(path: str | os.PathLike[str], document: QuotaDocument) -> None:
    """Write ``document`` atomically (a temporary file renamed over ``path``).

    A reader, or a crash mid-write, never sees half a file.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(document.to_dict(), out, indent=1)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def mean_session_seconds(observations: Sequence[Observation]) -> float | None:
    """Mean session duration over ``observations``, weighted by sessions closed in each."""
    closed = [(o.sessions_closed, o.mean_session_seconds) for o in observations
              if o.sessions_closed and o.mean_session_seconds is not None]
    total = sum(count for count, _ in closed)
    if not total:
        return None
    return math.fsum(count * seconds for count, seconds in closed) / total
