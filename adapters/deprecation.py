"""Old adapter names kept for one release, each answered with a DeprecationWarning.

Several first names clashed with the frameworks' own vocabulary (FastAPI's SQL-tutorial
``SessionDep``/``get_session``, Litestar's ``request.session`` and its SQLAlchemy plugin's
``provide_session``, Channels' ``guard(app, guard=...)`` taking a parameter named like itself).
An adapter serves its old names through a module ``__getattr__`` built here, so they are not
in the module's namespace, ``import *`` or ``__all__``, and every use says what replaces it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

REMOVAL = "the next release"


def deprecated_names(module: str, renamed: Mapping[str, str],
                     namespace: Mapping[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves ``renamed`` old names (old -> new) with a warning.

    Args:
        module: The adapter's ``__name__``, for the messages.
        renamed: Old name -> new name, both in ``namespace``'s module.
        namespace: The adapter's ``globals()``, read when an old name is asked for.
    """

    def __getattr__(name: str) -> Any:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is deprecated and will be removed in {REMOVAL}; "
                      f"use {module}.{new}", DeprecationWarning, stacklevel=2)
        return namespace[new]

    return __getattr__
