"""The quota model ``M = alpha·QPS·L + beta·sqrt(L) + gamma``: observations, fit, arithmetic.

``M`` is the peak memory (bytes) of a window, ``QPS`` the rate of new sessions in it and ``L``
the mean context length (tokens) of its requests. The three terms read as:

* ``alpha·QPS·L`` — what the load holds: by Little's law ``QPS·D`` sessions are open at once (``D``
  the mean session duration), each holding state proportional to its context, so ``alpha = c / D``
  where ``c`` is bytes per token of one open session;
* ``beta·sqrt(L)`` — per-process costs that grow sublinearly with context (allocator arenas, buffers
  sized to the longest prompt, tokenizer caches);
* ``gamma`` — the baseline: interpreter, framework, weights.

Pure arithmetic on plain data, with no dependency: the guard, the recorder and the CLI share it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from llm_guard_sdk.errors import GuardError

MIN_OBSERVATIONS = 6
"""Fewest windows :func:`fit` accepts: three parameters plus enough residual degrees of freedom
for the goodness-of-fit figures to mean something."""
TARGETS = ("process", "held")
"""What ``M`` is: the process's peak memory reading, or the peak bytes sessions account."""
_SPREAD = 1e-3  # relative spread below which a variable counts as constant
_COLLINEAR = 1e-6  # 1 - r² of the two load terms below which they cannot be told apart


class QuotaFitError(GuardError, ValueError):
    """The observations cannot support a fit (too few, or QPS and L did not vary)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One window of the recorder (or one row of a saved file).

    Attributes:
        qps: New sessions per second in the window.
        context_tokens: Mean context length (tokens) of the requests reported in the window.
        peak_process_bytes: Highest process memory reading in the window (the default ``M``).
        peak_held_bytes: Highest sum of the sessions' accounted bytes in the window.
        window_seconds: How long the window lasted.
        sessions_opened: Sessions opened in the window (``qps * window_seconds``).
        requests: Context lengths reported in the window.
        peak_sessions: Most sessions open at once at a sample in the window.
        sessions_closed: Sessions that closed in the window.
        mean_session_seconds: Their mean age at close, None when none closed.
    """

    qps: float
    context_tokens: float
    peak_process_bytes: int
    peak_held_bytes: int = 0
    window_seconds: float = 0.0
    sessions_opened: int = 0
    requests: int = 0
    peak_sessions: int = 0
    sessions_closed: int = 0
    mean_session_seconds: float | None = None

    def __post_init__(self) -> None:
        for name in ("qps", "context_tokens", "peak_process_bytes", "peak_held_bytes",
                     "window_seconds", "sessions_opened", "requests", "peak_sessions",
                     "sessions_closed", "mean_session_seconds"):
            value = getattr(self, name)
            if value is None and name == "mean_session_seconds":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value < 0:
                raise ValueError(f"observation field {name!r} must be a finite number >= 0, "
                                 f"got {value!r}")

    def memory(self, target: str = "process") -> int:
        """``M`` of this window for ``target`` (see :data:`TARGETS`)."""
        return self.peak_held_bytes if target == "held" else self.peak_process_bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Observation:
        """Build from :meth:`to_dict` output; ValueError naming the first bad or missing field."""
        known = {f.name for f in fields(cls)}
        if missing := [n for n in ("qps", "context_tokens", "peak_process_bytes")
                       if n not in data]:
            raise ValueError(f"observation lacks {', '.join(missing)}")
        if unknown := sorted(set(data) - known):
            raise ValueError(f"observation has unknown field(s) {', '.join(unknown)}")
        return cls(**{k: data[k] for k in known if k in data})


@dataclass(frozen=True, slots=True)
class Capacity:
    """What fits under the evict threshold at one context length (see :meth:`QuotaFit.capacity`).

    Attributes:
        budget_bytes: ``evict_at · limit``: memory the model may predict before eviction starts.
        base_bytes: ``beta·sqrt(L) + gamma``: predicted with no load at all.
        max_qps: The highest request rate whose prediction stays within the budget; None when
            the fit sees no growth with load (``alpha <= 0``), so the model sets no bound.
        per_session_bytes: ``alpha·L / D``: what one more concurrent session adds (None as above).
        sessions: ``⌊max_qps · D⌋`` concurrent sessions (Little's law), None as above.
    """

    budget_bytes: float
    base_bytes: float
    max_qps: float | None
    per_session_bytes: float | None
    sessions: int | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class QuotaFit:
    """Fitted ``alpha``, ``beta``, ``gamma`` with goodness-of-fit figures.

    Attributes:
        alpha: Bytes per (request/s · token).
        beta: Bytes per sqrt(token).
        gamma: Bytes.
        r_squared: Share of the variance of ``M`` the model explains (1 when ``M`` is constant
            and the fit is exact).
        residual_std_error: ``sqrt(SSR / (n - 3))`` in bytes: the typical miss of a prediction.
        n: Observations the fit used.
        target: What ``M`` was (see :data:`TARGETS`).
    """

    alpha: float
    beta: float
    gamma: float
    r_squared: float
    residual_std_error: float
    n: int
    target: str = "process"

    def predict(self, qps: float, context_tokens: float) -> float:
        """Predicted peak memory (bytes) at ``qps`` new sessions/s of mean context ``L``."""
        _check_load(qps, context_tokens)
        return self.alpha * qps * context_tokens + self.beta * math.sqrt(context_tokens) \
            + self.gamma

    def session_bytes(self, context_tokens: float, session_seconds: float) -> float | None:
        """``alpha·L / D``: the memory one more concurrent session of context ``L`` adds.

        From Little's law: ``N = QPS · D`` sessions are open at once, so the load term
        ``alpha·QPS·L`` is ``(alpha·L / D) · N``. None when ``alpha <= 0`` (no growth with load).
        """
        _check_load(0.0, context_tokens)
        if not session_seconds > 0:
            raise ValueError(f"session duration must be > 0 seconds, got {session_seconds!r}")
        return self.alpha * context_tokens / session_seconds if self.alpha > 0 else None

    def capacity(self, limit_bytes: float, evict_at: float, *, context_tokens: float,
                 session_seconds: float) -> Capacity:
        """The largest load at context ``L`` whose prediction stays under ``evict_at · limit``.

        The budget is ``B = evict_at · limit``; the highest rate is
        ``QPS* = (B - beta·sqrt(L) - gamma) / (alpha·L)`` (0 when the baseline alone passes
        ``B``), and the concurrent sessions are ``⌊QPS* · D⌋`` for a mean session duration
        ``D`` (Little's law: assumes a steady state in which sessions last ``D`` seconds on
        average).
        """
        if not limit_bytes > 0 or not 0 < evict_at <= 1:
            raise ValueError(f"need limit_bytes > 0 and evict_at in (0, 1], got {limit_bytes!r}"
                             f" and {evict_at!r}")
        budget = evict_at * limit_bytes
        base = self.predict(0.0, context_tokens)
        per_session = self.session_bytes(context_tokens, session_seconds)
        if per_session is None or context_tokens == 0:
            return Capacity(budget, base, None, per_session, None)
        max_qps = max(0.0, (budget - base) / (self.alpha * context_tokens))
        return Capacity(budget, base, max_qps, per_session, math.floor(max_qps * session_seconds))

    def sessions_that_fit(self, limit_bytes: float, evict_at: float, *, context_tokens: float,
                          session_seconds: float) -> int | None:
        """How many concurrent sessions fit under the evict threshold (see :meth:`capacity`)."""
        return self.capacity(limit_bytes, evict_at, context_tokens=context_tokens,
                             session_seconds=session_seconds).sessions

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe fields."""
        return asdict(self)


def _check_load(qps: float, context_tokens: float) -> None:
    for name, value in (("qps", qps), ("context_tokens", context_tokens)):
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


def _varies(values: list[float]) -> bool:
    high, low = max(values), min(values)
    return high - low > _SPREAD * max(abs(high), abs(low))


def fit(observations: Iterable[Observation], *, target: str = "process") -> QuotaFit:
    """Estimate ``alpha``, ``beta``, ``gamma`` by ordinary least squares.

    Solved by hand rather than with numpy, which is not a dependency of the core (vLLM brings
    it, the guard must run without it). Three parameters make that cheap and safe: centring
    every variable on its mean removes ``gamma`` from the normal equations, leaving a 2x2
    system in ``alpha`` and ``beta`` solved in closed form; ``gamma`` then follows from the
    means. Centring is also what keeps the normal equations well conditioned here (``QPS·L``
    is in the millions, the constant column is 1), and the collinearity check below refuses
    the one case in which they would still be ill conditioned, which is the case least
    squares cannot answer anyway.

    Raises:
        QuotaFitError: Fewer than :data:`MIN_OBSERVATIONS` observations, QPS or L constant
            across them, or ``QPS·L`` and ``sqrt(L)`` moving together (L varied only with QPS).
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    rows = list(observations)
    n = len(rows)
    need = (f"the fit needs at least {MIN_OBSERVATIONS} windows in which both the request "
            "rate (QPS) and the context length (L) vary")
    if n < MIN_OBSERVATIONS:
        raise QuotaFitError(f"too little data to fit the quota model: {n} observation(s); {need}")
    qps = [o.qps for o in rows]
    length = [o.context_tokens for o in rows]
    for name, values in (("QPS", qps), ("context length L", length)):
        if not _varies(values):
            raise QuotaFitError(f"degenerate data: {name} is constant ({values[0]:g}) across "
                                f"{n} observations; {need}")
    x1 = [q * c for q, c in zip(qps, length, strict=True)]
    x2 = [math.sqrt(c) for c in length]
    y = [float(o.memory(target)) for o in rows]
    m1, m2, my = (math.fsum(v) / n for v in (x1, x2, y))
    d1, d2, dy = [v - m1 for v in x1], [v - m2 for v in x2], [v - my for v in y]
    s11, s22, s12 = _dot(d1, d1), _dot(d2, d2), _dot(d1, d2)
    s1y, s2y, syy = _dot(d1, dy), _dot(d2, dy), _dot(dy, dy)
    det = s11 * s22 - s12 * s12
    if s11 <= 0 or s22 <= 0 or det <= _COLLINEAR * s11 * s22:
        raise QuotaFitError(f"degenerate data: across {n} observations QPS·L and sqrt(L) move "
                            f"together, so their effects cannot be separated; {need} "
                            "independently (several context lengths at each rate)")
    alpha = (s22 * s1y - s12 * s2y) / det
    beta = (s11 * s2y - s12 * s1y) / det
    gamma = my - alpha * m1 - beta * m2
    residuals = [v - (alpha * a + beta * b + gamma) for v, a, b in zip(y, x1, x2, strict=True)]
    ssr = _dot(residuals, residuals)
    r_squared = 1.0 - ssr / syy if syy > 0 else 1.0
    rse = math.sqrt(ssr / (n - 3))
    return QuotaFit(alpha, beta, gamma, r_squared, rse, n, target)


def _dot(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))
