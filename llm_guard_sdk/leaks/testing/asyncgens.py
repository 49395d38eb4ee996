"""Watch async generators during a test without breaking the event loop's own hooks.

Every event loop installs ``sys.set_asyncgen_hooks`` while it runs (asyncio: ``firstiter`` to
remember the generator for ``shutdown_asyncgens``, ``finalizer`` to schedule ``aclose()`` when
the GC finds one unclosed) and restores the previous hooks when it stops. Installing our own
hooks before the loop starts would be overwritten; replacing the loop's would break it. So for
the duration of a test window, ``sys.set_asyncgen_hooks`` itself is wrapped: whatever hooks a
loop installs are chained behind ours, which only record and always delegate. The finalizer
is stored per generator at its first iteration, so generators started in the window report
their GC finalisation even after the window ends (they are then ignored).

Each loop *stop* (the restore call) is also a checkpoint: pending tasks and suspended
generators are still intact there, before a test runner's teardown cancels and closes them.
"""

from __future__ import annotations

import gc
import sys
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

from llm_guard_sdk.leaks.runtime.introspect import is_a

Hook = Callable[[Any], Any]
_MARK = "__llm_guard_inner__"


def where(agen: Any) -> str:
    """``file:line`` where an async generator is suspended (or defined, once finished)."""
    frame = getattr(agen, "ag_frame", None)
    code = agen.ag_code
    line = frame.f_lineno if frame is not None else code.co_firstlineno
    return f"{code.co_filename}:{line}"


class AsyncGenWindow:
    """One test's view of async generators: started ones (weakly) and GC-finalised ones.

    Args:
        on_loop_stop: Called (in the installing thread) each time an event loop stops.
    """

    def __init__(self, on_loop_stop: Callable[[], None] | None = None) -> None:
        self.recording = False  # generators started while True are tracked
        self.open = False  # finalisations reported while True
        self.started: list[weakref.ref[Any]] = []
        self.finalised: list[dict[str, Any]] = []
        self._inner: dict[int, dict[str, Any]] = {}  # generator id -> event of its iterator
        self._sites: dict[int, str] = {}  # generator id -> where it was first iterated
        self.errors: list[str] = []  # our own failures inside the loop's hooks
        self.on_loop_stop = on_loop_stop
        self._thread = threading.get_ident()
        self._original: Callable[..., None] | None = None
        self._patched: Callable[..., None] | None = None

    # -- hook wrappers -----------------------------------------------------------------------

    def _wrap_firstiter(self, inner: Hook | None) -> Hook | None:
        inner = getattr(inner, _MARK, inner)
        if inner is None:
            return None

        def firstiter(agen: Any) -> Any:
            if self.recording:
                self.started.append(weakref.ref(agen))
                caller = sys._getframe(1)  # the consumer's `async for` / `__anext__` call
                self._sites[id(agen)] = f"{caller.f_code.co_filename}:{caller.f_lineno}"
            return inner(agen)

        setattr(firstiter, _MARK, inner)
        return firstiter

    def _wrap_finalizer(self, inner: Hook | None) -> Hook | None:
        inner = getattr(inner, _MARK, inner)
        if inner is None:  # no loop hooks: the interpreter closes it itself
            return None

        def finalizer(agen: Any) -> Any:
            if self.open:
                try:
                    self._record(agen)
                except Exception as exc:  # never break the loop's own finaliser
                    self.errors.append(f"async generator finaliser: {exc!r}")
            return inner(agen)

        setattr(finalizer, _MARK, inner)
        return finalizer

    def _record(self, agen: Any) -> None:
        """Note a GC-finalised generator; ones it was iterating join its event, not new ones.

        Dropping an outer generator (``async for line in response.aiter_lines(): return``)
        finalises the chain of generators it iterates too; one cause, one finding.
        """
        event = self._inner.pop(id(agen), None)
        site = self._sites.pop(id(agen), "")
        if event is not None:
            event["inner"].append(agen.ag_code.co_qualname)
        else:
            event = {"name": agen.ag_code.co_qualname, "where": where(agen), "inner": [],
                     "site": site}
            self.finalised.append(event)
        for child in gc.get_referents(agen):  # includes the frame's stack: `async for` iterators
            if is_a(child, types.AsyncGeneratorType) and child.ag_frame is not None:
                self._inner[id(child)] = event

    # -- install -----------------------------------------------------------------------------

    def install(self) -> None:
        """Wrap ``sys.set_asyncgen_hooks`` and the hooks installed right now."""
        original = sys.set_asyncgen_hooks
        names = ("firstiter", "finalizer")

        def set_asyncgen_hooks(*args: Any, **kwargs: Any) -> None:
            given = dict(zip(names, args, strict=False)) | kwargs
            if threading.get_ident() != self._thread:
                original(**given)
                return
            first, final = given.get("firstiter"), given.get("finalizer")
            starting = hasattr(getattr(first, "__self__", None), "call_soon")
            if "firstiter" in given:
                given["firstiter"] = self._wrap_firstiter(first)
            if "finalizer" in given:
                given["finalizer"] = self._wrap_finalizer(final)
            original(**given)
            if not starting and self.on_loop_stop is not None:
                try:
                    self.on_loop_stop()
                except Exception as exc:  # never break the loop's run_forever cleanup
                    self.errors.append(f"checkpoint at loop stop: {exc!r}")

        self._original, self._patched = original, set_asyncgen_hooks
        current = sys.get_asyncgen_hooks()
        original(firstiter=self._wrap_firstiter(current.firstiter),
                 finalizer=self._wrap_finalizer(current.finalizer))
        sys.set_asyncgen_hooks = set_asyncgen_hooks
        self.open = True

    def uninstall(self) -> None:
        """Restore ``sys.set_asyncgen_hooks`` and unwrap the hooks installed right now."""
        self.open = self.recording = False
        self._sites.clear()
        original = self._original
        if original is None:
            return
        if sys.set_asyncgen_hooks is self._patched:
            sys.set_asyncgen_hooks = original
        current = sys.get_asyncgen_hooks()
        original(firstiter=getattr(current.firstiter, _MARK, current.firstiter),
                 finalizer=getattr(current.finalizer, _MARK, current.finalizer))
        self._original = self._patched = None

    def suspended(self) -> list[Any]:
        """Generators started while recording that are alive and suspended (not finished)."""
        out = []
        for ref in self.started:
            agen = ref()
            if agen is not None and agen.ag_frame is not None and not agen.ag_running:
                out.append(agen)
        return out
