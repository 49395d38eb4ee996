"""The optional ``leaks`` extra (objgraph, pympler) and graphviz, loaded only when needed.

Importing objgraph or pympler costs tens of milliseconds and they may be absent; the sweeper and
the pytest plugin must import fast and keep working without them (weak references and the GC
alone still say *what* leaked and who holds it; sizes and graphs need the extra). Each loader
caches its answer.
"""

from __future__ import annotations

import functools
import importlib
import shutil
from types import ModuleType


@functools.cache
def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def load_objgraph() -> ModuleType | None:
    """The ``objgraph`` module, or None when the ``leaks`` extra is not installed."""
    return _load("objgraph")


def load_asizeof() -> ModuleType | None:
    """``pympler.asizeof``, or None when the ``leaks`` extra is not installed."""
    return _load("pympler.asizeof")


@functools.cache
def dot_path() -> str | None:
    """Path of graphviz ``dot`` (needed for PNG graphs), or None."""
    return shutil.which("dot")


def mode() -> dict[str, object]:
    """What forensics can do here; reports include it so a missing extra is never silent."""
    missing = [name for name, mod in (("objgraph", load_objgraph()),
                                      ("pympler", load_asizeof())) if mod is None]
    notes = []
    if "objgraph" in missing:
        notes.append("no graphs (objgraph missing)")
    if "pympler" in missing:
        notes.append("no sizes (pympler missing)")
    if "objgraph" not in missing and dot_path() is None:
        notes.append("no PNG graphs (graphviz 'dot' not found)")
    return {
        "full": not missing,
        "missing": missing,
        "text": "full" if not notes else "degraded: " + "; ".join(notes)
        + ("; install llm-guard-sdk[leaks]" if missing else ""),
    }
