"""The memory quota model ``M = alpha·QPS·L + beta·sqrt(L) + gamma`` and its tools.

The fit, its recorder and ``llm-guard plan``:

* :mod:`.model` — :class:`Observation`, :func:`fit` (least squares, goodness of fit),
  :class:`QuotaFit` (``predict``, ``capacity``, ``sessions_that_fit``); pure arithmetic.
* :mod:`.recorder` — :class:`QuotaRecorder`, the guard extension ``"quota"``: windowed
  observations, the ``quota`` status section, ``GET /llm-guard/quota``, optional admission.
* :mod:`.admission` — the admission check (shed reason ``quota``).
* :mod:`.store` — the JSON document shared by the route, ``save``/``load`` and the CLI.
* :mod:`.settings` — :class:`QuotaSettings` (``LLM_GUARD_QUOTA_*``).
* :mod:`.cli` — the ``plan`` subcommand of ``llm-guard``.

The core never imports this package; enable it with
``guard.add_extension(QuotaRecorder())``. See ``docs/quota.md``.
"""

from llm_guard_sdk.quota.model import (
    MIN_OBSERVATIONS,
    Capacity,
    Observation,
    QuotaFit,
    QuotaFitError,
    fit,
)
from llm_guard_sdk.quota.recorder import QuotaRecorder, observe_context
from llm_guard_sdk.quota.settings import QuotaSettings
from llm_guard_sdk.quota.store import QuotaDocument, read_document, write_document

__all__ = [
    "MIN_OBSERVATIONS",
    "Capacity",
    "Observation",
    "QuotaDocument",
    "QuotaFit",
    "QuotaFitError",
    "QuotaRecorder",
    "QuotaSettings",
    "fit",
    "observe_context",
    "read_document",
    "write_document",
]
