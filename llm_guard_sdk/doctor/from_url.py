"""Collect the facts from a running guard over HTTP: its status (twice) and its config.

Rates come from two status samples ``interval`` seconds apart (the counters' difference over
the difference of the guard's own uptime clock), or, with ``interval`` 0, from the counters
over the whole uptime; the report says which. Behind several workers the two samples may come
from different processes (``worker.pid`` differs): then the second one's lifetime averages are
used, and said so.

Every failure is a :class:`~llm_guard_sdk.cli_common.CommandError` with exit code 2 and one
line: unreachable, not JSON, not a guard's status, or refused (a 401 says to pass the token).
"""

from __future__ import annotations

import time
from typing import Any

from llm_guard_sdk.cli_common import EXIT_USAGE, TOKEN_ENV, CommandError, endpoint, fetch_json
from llm_guard_sdk.doctor.model import Facts

_REFUSED = {
    401: f"the guard wants its token: pass --token or set ${TOKEN_ENV}",
    403: "the guard refused this client (not loopback, or behind a proxy): pass --token",
    404: "no guard route there: check --url and --prefix",
}


def fetch_guard(url: str, token: str | None, timeout: float) -> Any:
    """GET ``url`` as JSON; every failure is one line with exit code 2."""
    try:
        return fetch_json(url, token, timeout=timeout)
    except CommandError as exc:
        if exc.http_status is None:
            raise CommandError(f"cannot read a guard at {exc}", code=EXIT_USAGE) from None
        hint = _REFUSED.get(exc.http_status, "not a guard's answer")
        raise CommandError(f"{url}: HTTP {exc.http_status}: {hint}", code=EXIT_USAGE,
                           http_status=exc.http_status) from None


def fetch_status(url: str, token: str | None, timeout: float) -> dict[str, Any]:
    """The status document, checked to be a guard's."""
    doc = fetch_guard(url, token, timeout)
    if not (isinstance(doc, dict) and isinstance(doc.get("memory"), dict) and "level" in doc
            and isinstance(doc.get("sessions"), dict)):
        raise CommandError(f"{url}: the answer is not a guard's status document",
                           code=EXIT_USAGE)
    return doc


def fetch_config(url: str, token: str | None, timeout: float) -> tuple[dict[str, Any], str]:
    """The guard's ``/config`` settings values (empty when it has no such route), and a note."""
    try:
        doc = fetch_guard(url, token, timeout)
    except CommandError as exc:
        return {}, f"settings: the guard's defaults assumed ({exc})"
    settings = doc.get("settings") if isinstance(doc, dict) else None
    if not isinstance(settings, dict):
        return {}, "settings: the guard's defaults assumed (no config document)"
    return {name: entry.get("value") for name, entry in settings.items()
            if isinstance(entry, dict)}, ""


def _pid(doc: dict[str, Any]) -> int | None:
    worker = doc.get("worker")
    pid = worker.get("pid") if isinstance(worker, dict) else None
    return pid if isinstance(pid, int) else None


def rates(first: dict[str, Any], second: dict[str, Any] | None
          ) -> tuple[float | None, float | None, str]:
    """Evictions and sheds per second, and how they were measured."""
    def totals(doc: dict[str, Any]) -> tuple[float, float, float]:
        sessions = doc.get("sessions", {})
        return (float(sessions.get("evicted_total", 0)), float(sessions.get("shed_total", 0)),
                float(doc.get("uptime_seconds", 0.0)))

    last = second if second is not None else first
    evicted, shed, uptime = totals(last)
    if second is not None and _pid(first) == _pid(second):
        e0, s0, u0 = totals(first)
        elapsed = uptime - u0
        if elapsed > 0 and evicted >= e0 and shed >= s0:
            return ((evicted - e0) / elapsed, (shed - s0) / elapsed,
                    f"measured over {elapsed:.2f} s between two status samples")
    basis = f"lifetime average over the guard's uptime ({uptime:.0f} s)"
    if second is not None:
        basis += "; the two samples came from different workers or a restarted guard"
    if uptime <= 0:
        return 0.0, 0.0, basis
    return evicted / uptime, shed / uptime, basis


def facts_from_status(doc: dict[str, Any], settings: dict[str, Any], *, target: str,
                      rates_: tuple[float | None, float | None, str]) -> Facts:
    """Fill :class:`Facts` from a status document and the guard's settings values."""
    memory = doc.get("memory", {})
    sources = memory.get("sources", {}) if isinstance(memory.get("sources"), dict) else {}
    thresholds = doc.get("thresholds", {})
    runtime = doc.get("runtime") if isinstance(doc.get("runtime"), dict) else None
    sessions = doc.get("sessions", {})
    facts = Facts(mode="url", target=target, worker_pid=_pid(doc), level=doc.get("level"),
                  pressure=memory.get("used_ratio"), rss_bytes=memory.get("rss_bytes"),
                  limit_bytes=memory.get("limit_bytes"),
                  limit_source=memory.get("limit_source") or None,
                  deciding_source=memory.get("source"),
                  eviction_rate=rates_[0], shed_rate=rates_[1], rate_basis=rates_[2],
                  internal_errors=doc.get("errors", {}).get("internal_total"),
                  stale_sources={name: str(entry.get("last_error") or "")
                                 for name, entry in sources.items() if entry.get("stale")})
    if "process" not in sources:
        facts.rss_bytes = None
        facts.absent["rss"] = "the guard does not read its RSS (no process source)"
    for name in ("warn", "evict", "shed"):
        if isinstance(thresholds.get(name), int | float):
            setattr(facts, f"{name}_at", float(thresholds[name]))
    for name in ("max_sessions", "idle_timeout", "idle_timeout_level"):
        if settings.get(name) is not None:
            setattr(facts, name, settings[name])
    cgroup = sources.get("cgroup")
    if isinstance(cgroup, dict):
        facts.cgroup_used_bytes = cgroup.get("used_bytes")
        facts.cgroup_limit_bytes = cgroup.get("limit_bytes")
    if runtime is not None:
        by_state = runtime.get("sessions_by_state", {})
        facts.open_fds, facts.max_fds = runtime.get("open_fds"), runtime.get("max_fds")
        facts.threads, facts.asyncio_tasks = runtime.get("threads"), runtime.get("asyncio_tasks")
        facts.gc = runtime.get("gc")
        facts.sessions_by_state = {state: int(entry.get("sessions", 0))
                                   for state, entry in by_state.items()}
        facts.held_total_bytes = sum(int(e.get("held_bytes", 0)) for e in by_state.values())
        facts.held_idle_bytes = int(by_state.get("idle", {}).get("held_bytes", 0))
    else:
        facts.sessions_by_state = {"active": int(sessions.get("active", 0)),
                                   "idle": int(sessions.get("idle", 0))}
    leaks, vllm, latency = doc.get("leaks"), doc.get("vllm"), doc.get("latency")
    facts.leaks = leaks if isinstance(leaks, dict) else None
    facts.vllm = vllm if isinstance(vllm, dict) else None
    facts.latency = latency if isinstance(latency, dict) else None
    return facts


def collect_url(base: str, prefix: str, token: str | None, *, interval: float,
                timeout: float = 10.0) -> Facts:
    """Two status samples ``interval`` seconds apart (one when 0) and the config."""
    status_url = endpoint(base, prefix, "/status")
    first = fetch_status(status_url, token, timeout)
    second: dict[str, Any] | None = None
    if interval > 0:
        time.sleep(interval)
        second = fetch_status(status_url, token, timeout)
    settings, note = fetch_config(endpoint(base, prefix, "/config"), token, timeout)
    last = second if second is not None else first
    try:
        facts = facts_from_status(last, settings, target=status_url,
                                  rates_=rates(first, second))
    except (TypeError, ValueError, AttributeError) as exc:
        raise CommandError(f"{status_url}: the answer is not a guard's status document ({exc})",
                           code=EXIT_USAGE) from None
    if note:
        facts.notes.append(note)
    return facts
