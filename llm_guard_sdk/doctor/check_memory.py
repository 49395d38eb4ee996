"""Memory indicators: RSS, the effective limit, the cgroup, idle sessions' share, the level.

RSS and the cgroup are judged against the guard's own thresholds (warn at ``warn_at``, crit at
``shed_at``: past it the guard refuses work), so the doctor and the guard never disagree about
what is too much. Fixes name the setting, its current value and a value that would fit.
"""

from __future__ import annotations

from llm_guard_sdk.doctor.model import (
    Facts,
    Indicator,
    Verdict,
    grade,
    missing,
    percent,
    round_up,
    size_text,
)

IDLE_SHARE_WARN = 0.5
IDLE_SHARE_CRIT = 0.8
IDLE_SHARE_MIN_HELD = 1024**2
"""Below this much held memory in all, what idle sessions hold does not matter."""
MIN_IDLE_TIMEOUT = 30.0
_LIMIT_STEP = 256 * 1024**2


def _bigger_limit(used: int, facts: Facts) -> str:
    """A limit under which ``used`` sits comfortably below the warn threshold."""
    target = max(facts.warn_at - 0.1, 0.1)
    return size_text(round_up(used / target, _LIMIT_STEP))


def _fewer_sessions(facts: Facts, ratio: float) -> str:
    live = facts.live_sessions
    if not live:
        return ""
    fitting = max(1, int(live * facts.warn_at / ratio))
    return (f", or cap concurrency: LLM_GUARD_MAX_SESSIONS from {facts.max_sessions} to "
            f"{min(fitting, facts.max_sessions)}")


def rss(facts: Facts) -> Indicator:
    """RSS of the process (and its children) against the effective limit."""
    if facts.rss_bytes is None:
        return missing("rss", facts.why_absent("rss", "the target reports no RSS"))
    limit = facts.limit_bytes
    if not limit:
        return Indicator("rss", facts.rss_bytes, "ok", text=size_text(facts.rss_bytes),
                         note="no memory limit known: nothing to judge RSS against")
    ratio = facts.rss_bytes / limit
    verdict = grade(ratio, facts.warn_at, facts.shed_at)
    text = f"{size_text(facts.rss_bytes)} = {percent(ratio)} of {size_text(limit)}"
    fix = (f"RSS is {percent(ratio)} of the {size_text(limit)} limit (warn at "
           f"{percent(facts.warn_at)}, shed at {percent(facts.shed_at)}): raise the memory "
           f"limit ({facts.limit_source or 'limit'}) from {size_text(limit)} to "
           f"{_bigger_limit(facts.rss_bytes, facts)}{_fewer_sessions(facts, ratio)}")
    return Indicator("rss", facts.rss_bytes, verdict, fix, text,
                     detail={"ratio": round(ratio, 4), "limit_bytes": limit})


def memory_limit(facts: Facts) -> Indicator:
    """The effective limit and where it comes from; the source deciding the pressure."""
    detail = {"source": facts.limit_source, "deciding_source": facts.deciding_source}
    if facts.limit_bytes is None:
        if facts.mode == "pid" and facts.limit_source is None:
            return missing("memory_limit", facts.why_absent("memory_limit", ""))
        return Indicator("memory_limit", None, "crit",
                         "no memory limit is known: set LLM_GUARD_MEMORY_LIMIT (e.g. 2Gi) or "
                         "give the container a memory limit (resources.limits.memory)",
                         "none", detail=detail)
    text = f"{size_text(facts.limit_bytes)} from {facts.limit_source}"
    if facts.deciding_source:
        text += f"; pressure decided by {facts.deciding_source}"
    if facts.limit_source == "host":
        return Indicator("memory_limit", facts.limit_bytes, "warn",
                         f"the limit is the whole machine's RAM ({size_text(facts.limit_bytes)}):"
                         " other processes can fill it first; give the container a memory "
                         "limit (resources.limits.memory) or set LLM_GUARD_MEMORY_LIMIT to this "
                         "server's share, e.g. "
                         f"{size_text(round_up(facts.limit_bytes / 2, _LIMIT_STEP))}",
                         text, detail=detail)
    return Indicator("memory_limit", facts.limit_bytes, "ok", text=text, detail=detail)


def cgroup_usage(facts: Facts) -> Indicator:
    """The container's working set against its cgroup limit (what the OOM killer counts)."""
    used, limit = facts.cgroup_used_bytes, facts.cgroup_limit_bytes
    if used is None or not limit:
        return missing("cgroup_usage", facts.absent.get(
            "cgroup_usage", "no cgroup memory limit (not in a container, or unlimited)"))
    ratio = used / limit
    verdict = grade(ratio, facts.warn_at, facts.shed_at)
    others = ""
    if facts.rss_bytes is not None and used > facts.rss_bytes * 1.5:
        others = (f"; this process holds only {size_text(facts.rss_bytes)}: look at the other "
                  "processes and the page cache in the container")
    fix = (f"the container's working set is {percent(ratio)} of its {size_text(limit)} cgroup "
           f"limit: raise resources.limits.memory from {size_text(limit)} to "
           f"{_bigger_limit(used, facts)}{others}")
    return Indicator("cgroup_usage", used, verdict, fix,
                     f"{size_text(used)} = {percent(ratio)} of {size_text(limit)}",
                     detail={"ratio": round(ratio, 4), "limit_bytes": limit})


def suggested_idle_timeout(idle_timeout: float, share: float) -> float:
    """An idle timeout that would free roughly the idle share: ``t * (1 - share)``, rounded.

    Rounded to 30 s (at least :data:`MIN_IDLE_TIMEOUT`) so the advice reads like a setting.
    """
    proposed = max(MIN_IDLE_TIMEOUT, round(idle_timeout * (1 - share) / 30) * 30)
    return min(proposed, idle_timeout)


def idle_share(facts: Facts) -> Indicator:
    """What share of the sessions' held memory idle sessions hold."""
    total, idle = facts.held_total_bytes, facts.held_idle_bytes
    if total is None or idle is None:
        return missing("idle_share", facts.why_absent(
            "idle_share", "the guard's status has no runtime section (an older release)"))
    if total < IDLE_SHARE_MIN_HELD:
        share = idle / total if total else 0.0
        return Indicator("idle_share", round(share, 4), "ok", text=percent(share),
                         note=f"sessions hold only {size_text(total)} in all")
    share = idle / total
    verdict = grade(share, IDLE_SHARE_WARN, IDLE_SHARE_CRIT)
    new = suggested_idle_timeout(facts.idle_timeout, share)
    fix = (f"idle sessions hold {percent(share)} of held memory: lower LLM_GUARD_IDLE_TIMEOUT "
           f"from {facts.idle_timeout:g} to {new:g} s")
    if verdict == "crit" and facts.idle_timeout_level != "normal":
        fix += (", and close idle sessions at any level: LLM_GUARD_IDLE_TIMEOUT_LEVEL from "
                f"{facts.idle_timeout_level} to normal")
    return Indicator("idle_share", round(share, 4), verdict, fix,
                     f"{percent(share)} ({size_text(idle)} of {size_text(total)})",
                     detail={"idle_bytes": idle, "held_bytes": total})


def level(facts: Facts) -> Indicator:
    """The guard's level: warn and evict are a warning, shed (refusing work) is critical."""
    if facts.level is None:
        return missing("level", facts.why_absent("level", "the target reports no level"))
    verdicts: dict[str, Verdict] = {"normal": "ok", "warn": "warn", "evict": "warn"}
    verdict = verdicts.get(facts.level, "crit")
    pressure = "" if facts.pressure is None else f" at {percent(facts.pressure)} pressure"
    source = f" from {facts.deciding_source}" if facts.deciding_source else ""
    fix = (f"the guard is at level {facts.level}{pressure}{source} (warn "
           f"{percent(facts.warn_at)}, evict {percent(facts.evict_at)}, shed "
           f"{percent(facts.shed_at)}): add memory or replicas, or lower load")
    return Indicator("level", facts.level, verdict, fix, f"{facts.level}{pressure}{source}")
