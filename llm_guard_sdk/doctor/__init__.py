"""``llm-guard doctor`` and ``llm-guard config``: a verdict with fixes, and the effective settings.

The doctor collects facts from a running guard (its status and config over HTTP) or from a
process id (psutil and its memory cgroup), judges each indicator against thresholds (OK, WARN,
CRIT) with a concrete fix, and exits 0/1/2 by the worst, for cron and CI. See docs/doctor.md.
Modules: model (Facts, Indicator, verdicts), check_memory / check_load / check_runtime (the
indicators and their thresholds), evaluate (all of them, the report), from_url, from_pid
(collection), render (rich table, plain text, JSON), cli and config_cli (the subcommands).
"""

from llm_guard_sdk.doctor.cli import DOCTOR_EXIT_CODES, add_doctor_command, cmd_doctor
from llm_guard_sdk.doctor.config_cli import add_config_command, cmd_config, local_report
from llm_guard_sdk.doctor.evaluate import CHECKS, evaluate, report
from llm_guard_sdk.doctor.from_pid import collect_pid
from llm_guard_sdk.doctor.from_url import collect_url, facts_from_status
from llm_guard_sdk.doctor.model import Facts, Indicator, Verdict, worst

__all__ = [
    "CHECKS",
    "DOCTOR_EXIT_CODES",
    "Facts",
    "Indicator",
    "Verdict",
    "add_config_command",
    "add_doctor_command",
    "cmd_config",
    "cmd_doctor",
    "collect_pid",
    "collect_url",
    "evaluate",
    "facts_from_status",
    "local_report",
    "report",
    "worst",
]
