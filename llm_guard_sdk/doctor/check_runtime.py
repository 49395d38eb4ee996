"""Runtime indicators: descriptors, threads, asyncio tasks, gc, leaks, sources, guard errors.

These find what grows without more sessions: leaked sockets, threads per request, tasks that
are never awaited, cycles the collector cannot free, objects closed sessions leave behind.
"""

from __future__ import annotations

from llm_guard_sdk.doctor.model import Facts, Indicator, Verdict, grade, missing, percent

FDS_WARN = 0.7  # of the soft RLIMIT_NOFILE
FDS_CRIT = 0.9
THREADS_WARN = 200
THREADS_CRIT = 1000
TASKS_BASE = 50  # tasks any server runs (sampler, server loops, ...)
TASKS_PER_SESSION = 8  # a session's pump, watch and stream tasks, generously
TASKS_CRIT_FACTOR = 4
GC_CRIT = 1000


def open_fds(facts: Facts) -> Indicator:
    """Open file descriptors against the soft ``RLIMIT_NOFILE`` (past it, accept fails)."""
    if facts.open_fds is None:
        return missing("open_fds", facts.why_absent(
            "open_fds", "the guard's status has no runtime section (an older release)"))
    if not facts.max_fds:
        return Indicator("open_fds", facts.open_fds, "ok", text=str(facts.open_fds),
                         note="no descriptor limit (RLIMIT_NOFILE unlimited or unknown)")
    ratio = facts.open_fds / facts.max_fds
    verdict = grade(ratio, FDS_WARN, FDS_CRIT)
    suggested = max(4096, 1 << (4 * facts.open_fds - 1).bit_length())
    fix = (f"{facts.open_fds} of {facts.max_fds} file descriptors open ({percent(ratio)}): "
           f"raise the limit from {facts.max_fds} to {suggested} (ulimit -n, systemd "
           "LimitNOFILE, the container's nofile ulimit), and check for leaked sockets "
           "(open_fds growing while sessions do not)")
    return Indicator("open_fds", facts.open_fds, verdict, fix,
                     f"{facts.open_fds} of {facts.max_fds}", detail={"max_fds": facts.max_fds})


def threads(facts: Facts) -> Indicator:
    """Threads of the process (a thread per request shows up here first)."""
    if facts.threads is None:
        return missing("threads", facts.why_absent("threads", "the target reports no threads"))
    verdict = grade(facts.threads, THREADS_WARN, THREADS_CRIT)
    fix = (f"{facts.threads} threads: blocking calls each take a thread; bound the default "
           "executor (loop.set_default_executor(ThreadPoolExecutor(max_workers=32))) and keep "
           "blocking work off the request path")
    return Indicator("threads", facts.threads, verdict, fix, str(facts.threads))


def asyncio_tasks(facts: Facts) -> Indicator:
    """Tasks on the event loop against what the live sessions explain."""
    tasks, live = facts.asyncio_tasks, facts.live_sessions
    if tasks is None:
        return missing("asyncio_tasks", facts.why_absent(
            "asyncio_tasks", "the guard's status has no runtime section (an older release)"))
    allowance = TASKS_BASE + TASKS_PER_SESSION * (live or 0)
    verdict = grade(tasks, allowance + 1, TASKS_CRIT_FACTOR * allowance + 1)
    fix = (f"{tasks} asyncio tasks for {live or 0} sessions (up to {allowance} expected): tasks "
           "are started and never finish; keep a reference to each and cancel it when its "
           "request ends; LLM_GUARD_LEAKS=1 and llm-guard snapshot show what grows")
    return Indicator("asyncio_tasks", tasks, verdict, fix, f"{tasks} for {live or 0} sessions",
                     detail={"expected_at_most": allowance})


def gc_uncollectable(facts: Facts) -> Indicator:
    """Objects the garbage collector found but cannot free, and its counts."""
    gc = facts.gc
    if gc is None:
        return missing("gc_uncollectable", facts.why_absent(
            "gc_uncollectable", "the guard's status has no runtime section (an older release)"))
    stuck = int(gc.get("uncollectable", 0)) + int(gc.get("garbage", 0))
    verdict = grade(stuck, 1, GC_CRIT)
    fix = (f"{stuck} objects the collector cannot free (gc.garbage, cycles through __del__ or "
           "DEBUG_SAVEALL): find their types with gc.garbage or llm-guard snapshot and break "
           "the cycle (weakref, or close() instead of __del__)")
    text = (f"{stuck} uncollectable; counts {gc.get('counts')}, collections "
            f"{gc.get('collections')}")
    return Indicator("gc_uncollectable", stuck, verdict, fix, text, detail=dict(gc))


def leak_suspects(facts: Facts) -> Indicator:
    """Objects of closed sessions still alive: suspected after the grace, then confirmed."""
    leaks = facts.leaks
    if leaks is None:
        return missing("leak_suspects", facts.why_absent(
            "leak_suspects", "the guard's leak tools are off (LLM_GUARD_LEAKS=1 turns them on)"))
    suspected = int(leaks.get("suspected_total", 0))
    confirmed = int(leaks.get("confirmed_total", 0))
    verdict: Verdict = "crit" if confirmed else "warn" if suspected else "ok"
    fix = (f"{confirmed} confirmed and {suspected} suspected leaks: objects of closed sessions "
           "stay alive; GET /llm-guard/leaks shows the reference chain of each, fix the "
           "holder (a global cache, a task, a callback) named there")
    return Indicator("leak_suspects", suspected, verdict, fix,
                     f"{suspected} suspected, {confirmed} confirmed",
                     detail={"confirmed_total": confirmed})


def sources(facts: Facts) -> Indicator:
    """Memory sources that fail to read (stale: they no longer count)."""
    stale = facts.stale_sources
    if stale is None:
        return missing("sources", facts.why_absent("sources", "the target reports no sources"))
    if not stale:
        return Indicator("sources", 0, "ok", text="all reading")
    names = ", ".join(f"{name} ({error or 'no error text'})" for name, error in stale.items())
    return Indicator("sources", len(stale), "warn",
                     f"memory sources fail to read and no longer count: {names}; fix their "
                     "access or drop them from LLM_GUARD_SOURCES", f"{len(stale)} stale")


def internal_errors(facts: Facts) -> Indicator:
    """Bugs the guard hit (each let its request through unguarded)."""
    if facts.internal_errors is None:
        return missing("internal_errors", facts.why_absent(
            "internal_errors", "the target reports no error count"))
    count = facts.internal_errors
    fix = (f"{count} internal errors: the guard hit a bug and let those requests through "
           "unguarded; see the log lines 'llm-guard internal error in ...' and report them")
    return Indicator("internal_errors", count, "warn" if count else "ok", fix, str(count))
