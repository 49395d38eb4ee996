"""Judge every indicator from the facts, in a fixed order, and the report around them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_guard_sdk.doctor import check_load, check_memory, check_runtime
from llm_guard_sdk.doctor.model import RANK, Facts, Indicator, missing, worst

Check = Callable[[Facts], Indicator]

CHECKS: tuple[Check, ...] = (
    check_memory.level,
    check_memory.rss,
    check_memory.memory_limit,
    check_memory.cgroup_usage,
    check_runtime.open_fds,
    check_runtime.threads,
    check_runtime.asyncio_tasks,
    check_load.sessions,
    check_memory.idle_share,
    check_load.eviction_rate,
    check_load.shed_rate,
    check_runtime.leak_suspects,
    check_runtime.gc_uncollectable,
    check_load.vllm_kv,
    check_load.vllm_queue,
    check_load.ttft_p99,
    check_runtime.sources,
    check_runtime.internal_errors,
)
"""Every indicator, in report order (memory first)."""


def judge(check: Check, facts: Facts) -> Indicator:
    """One indicator; a value of an unexpected type (a newer or odd guard) is a note, not a crash.

    The doctor's purpose is to diagnose a server in trouble, so one malformed figure must not
    cost the operator the other indicators.
    """
    try:
        return check(facts)
    except (TypeError, ValueError, ArithmeticError, AttributeError) as exc:
        return missing(check.__name__, f"could not judge the reported value: {exc}")


def evaluate(facts: Facts) -> list[Indicator]:
    """Every indicator of :data:`CHECKS`, judged from ``facts``."""
    return [judge(check, facts) for check in CHECKS]


def report(facts: Facts) -> dict[str, Any]:
    """The ``--json`` document: the target, every indicator, the worst verdict, its exit code."""
    indicators = evaluate(facts)
    verdict = worst(indicators)
    return {
        "target": {"mode": facts.mode, "address": facts.target, "worker_pid": facts.worker_pid},
        "verdict": verdict,
        "exit_code": RANK[verdict],
        "rates": facts.rate_basis,
        "notes": list(facts.notes),
        "indicators": [indicator.to_dict() for indicator in indicators],
    }
