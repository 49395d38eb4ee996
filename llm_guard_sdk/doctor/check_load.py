"""Load indicators: sessions, eviction and shed rates, the vLLM engine, time to first token.

Evictions and sheds are the guard doing its job, but a steady rate of either means the server
is too small for its load; the fixes say which limit to move and by how much.
"""

from __future__ import annotations

from llm_guard_sdk.doctor.model import Facts, Indicator, grade, missing, percent

SESSIONS_WARN = 0.8
SESSIONS_CRIT = 0.95
RATE_WARN = 1e-9  # any eviction or shed in the window
RATE_CRIT = 1.0  # per second
KV_WARN = 0.9
KV_CRIT = 0.98
QUEUE_WARN = 0.5  # of LLM_GUARD_MAX_WAITING_REQUESTS
QUEUE_CRIT = 0.9
QUEUE_UNCAPPED_FACTOR = 2  # waiting >= 2 x running, with no cap set
TTFT_WARN = 2.0  # seconds
TTFT_CRIT = 10.0

_SCALE_OUT = "add replicas (scale on llm_guard_memory_pressure_ratio, see docs/deploy.md)"


def sessions(facts: Facts) -> Indicator:
    """Live sessions by state against ``max_sessions`` (new ones are refused past it)."""
    by_state, live = facts.sessions_by_state, facts.live_sessions
    if by_state is None or live is None:
        return missing("sessions", facts.why_absent("sessions", "the target reports no sessions"))
    ratio = live / facts.max_sessions
    verdict = grade(ratio, SESSIONS_WARN, SESSIONS_CRIT)
    text = ", ".join(f"{count} {state}" for state, count in by_state.items())
    fix = (f"{live} of LLM_GUARD_MAX_SESSIONS={facts.max_sessions} sessions ({percent(ratio)}): "
           f"new sessions are refused at the cap; raise LLM_GUARD_MAX_SESSIONS from "
           f"{facts.max_sessions} to {facts.max_sessions * 2} if memory allows (see rss), or "
           f"{_SCALE_OUT}")
    return Indicator("sessions", live, verdict, fix, text,
                     detail={"by_state": by_state, "max_sessions": facts.max_sessions})


def _rate(name: str, rate: float | None, facts: Facts, fix: str) -> Indicator:
    if rate is None:
        return missing(name, facts.why_absent(name, "the target reports no counters"))
    verdict = grade(rate, RATE_WARN, RATE_CRIT)
    return Indicator(name, round(rate, 4), verdict, fix, f"{rate:.3g}/s", note=facts.rate_basis)


def eviction_rate(facts: Facts) -> Indicator:
    """Sessions evicted per second (memory pressure closing work in progress)."""
    rate = facts.eviction_rate or 0.0
    fix = (f"evicting {rate:.3g} sessions/s: memory is short for this load; raise the memory "
           f"limit, lower LLM_GUARD_MAX_SESSIONS from {facts.max_sessions} to "
           f"{max(1, facts.max_sessions // 2)}, or {_SCALE_OUT}")
    return _rate("eviction_rate", facts.eviction_rate, facts, fix)


def shed_rate(facts: Facts) -> Indicator:
    """New sessions refused per second (503 / WebSocket 1013)."""
    rate = facts.shed_rate or 0.0
    fix = (f"refusing {rate:.3g} new sessions/s with 503: the server is at its limits (memory, "
           f"LLM_GUARD_MAX_SESSIONS={facts.max_sessions} or a tenant cap); {_SCALE_OUT}, or "
           "raise the limit that refuses them (see level and sessions)")
    return _rate("shed_rate", facts.shed_rate, facts, fix)


def vllm_kv(facts: Facts) -> Indicator:
    """The vLLM KV cache's usage (advisory: full blocks make vLLM queue or preempt)."""
    usage = (facts.vllm or {}).get("kv_cache_usage")
    if usage is None:
        return missing("vllm_kv", facts.why_absent(
            "vllm_kv", "no vLLM engine on this guard (no vllm status section)"))
    ratio = float(usage)
    verdict = grade(ratio, KV_WARN, KV_CRIT)
    fix = (f"the KV cache is {percent(ratio)} full: vLLM queues or preempts requests; raise "
           "gpu_memory_utilization (e.g. 0.90 to 0.95), lower max_num_seqs or max_model_len, "
           "or enable LLM_GUARD_DEGRADE=warn to shorten max_tokens under pressure")
    return Indicator("vllm_kv", round(ratio, 4), verdict, fix, percent(ratio))


def vllm_queue(facts: Facts) -> Indicator:
    """Requests waiting in the vLLM engine, against ``LLM_GUARD_MAX_WAITING_REQUESTS``."""
    vllm = facts.vllm or {}
    waiting = vllm.get("waiting")
    if waiting is None:
        return missing("vllm_queue", facts.why_absent(
            "vllm_queue", "no vLLM engine on this guard (no vllm status section)"))
    running = int(vllm.get("running") or 0)
    cap = vllm.get("max_waiting_requests")
    text = f"{waiting} waiting, {running} running"
    if cap:
        verdict = grade(waiting / cap, QUEUE_WARN, QUEUE_CRIT)
        fix = (f"{waiting} requests wait of LLM_GUARD_MAX_WAITING_REQUESTS={cap}: the engine is "
               f"saturated and will shed past {cap}; {_SCALE_OUT}, or lower max_tokens "
               "(LLM_GUARD_DEGRADE=warn)")
        return Indicator("vllm_queue", waiting, verdict, fix, f"{text} (cap {cap})")
    uncapped_warn = waiting > 0 and waiting >= QUEUE_UNCAPPED_FACTOR * max(running, 1)
    suggested = QUEUE_UNCAPPED_FACTOR * max(running, 1)
    fix = (f"{waiting} requests wait behind {running} running and nothing caps the queue: set "
           f"LLM_GUARD_MAX_WAITING_REQUESTS={suggested} so excess requests get a 503 at once "
           "instead of waiting")
    return Indicator("vllm_queue", waiting, "warn" if uncapped_warn else "ok", fix, text)


def ttft_p99(facts: Facts) -> Indicator:
    """The 99th percentile of the time from a stream's start to its first chunk."""
    latency = facts.latency
    if latency is None or latency.get("first_token_p99_seconds") is None:
        if latency is not None:
            return missing("ttft_p99", "no stream has sent a first chunk yet")
        return missing("ttft_p99", facts.why_absent(
            "ttft_p99", "the guard reports no stream latency (no latency status section)"))
    p99 = float(latency["first_token_p99_seconds"])
    verdict = grade(p99, TTFT_WARN, TTFT_CRIT)
    fix = (f"p99 time to first token is {p99:.2f} s: requests wait before their first token "
           f"(engine queue or prefill); cap concurrency: LLM_GUARD_MAX_SESSIONS from "
           f"{facts.max_sessions} to {max(1, facts.max_sessions // 2)} or set "
           f"LLM_GUARD_MAX_WAITING_REQUESTS, or {_SCALE_OUT}")
    return Indicator("ttft_p99", round(p99, 4), verdict, fix, f"{p99:.3g} s",
                     note=f"{latency.get('samples', 0)} samples",
                     detail={"inter_chunk_p99_seconds": latency.get("inter_chunk_p99_seconds")})
