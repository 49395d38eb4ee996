"""The per-test leak check behind the pytest plugin (kept free of pytest imports).

A :class:`TestLeakCheck` spans one test, setup to teardown. It collects what should die (the
sessions, streams, generators and attachments of every guard's sessions closed meanwhile, and
whatever the test passed to ``leak_guard.track``), watches async generators, and after teardown
and a collection says what survived and who holds it.

Test runners hide two leaks at teardown: closing the event loop cancels pending tasks and
closes suspended async generators. So the check also takes evidence at *checkpoints*, each time
a loop stops during the test call and when the call returns: objects then held by a pending
task, and generators then suspended, are remembered; they fail the test even when the loop's
teardown freed or closed them afterwards.
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_guard_sdk.leaks.runtime.backrefs import stack_ids
from llm_guard_sdk.leaks.runtime.chains import search
from llm_guard_sdk.leaks.runtime.forensics import Limits, examine, frame_info, retained_size
from llm_guard_sdk.leaks.runtime.introspect import is_a
from llm_guard_sdk.leaks.runtime.tracking import REVIVED, DeathWatch, Tracked, held, weak
from llm_guard_sdk.leaks.testing import growth
from llm_guard_sdk.leaks.testing.asyncgens import AsyncGenWindow, where
from llm_guard_sdk.leaks.testing.follow import follower
from llm_guard_sdk.leaks.testing.report import Finding, format_failure


@dataclass
class Settings:
    """What to check for one test (from the option, the marker and the fixture)."""

    types: tuple[Any, ...] = ()
    repeat: int = 1
    max_growth: int = 0
    asyncgens: bool = True
    graph_dir: Path | None = None
    limits: Limits = field(default_factory=Limits)


@dataclass
class _Evidence:
    """What a checkpoint saw about one object before the loop's teardown."""

    searched: bool = False
    chain: str = ""
    task_held: bool = False
    size: int | None = None
    frame: dict[str, Any] | None = None


class TestLeakCheck:
    """One test's leak check: :meth:`start`, the call phase, :meth:`failure`, :meth:`stop`."""

    __test__ = False  # not a pytest test class, whatever the name says

    def __init__(self, name: str, settings: Settings) -> None:
        self.name = name
        self.settings = settings
        self.records: list[Tracked] = []
        self.in_call = False
        self.repeating = False
        self.growth: list[Finding] = []
        self._evidence: dict[int, _Evidence] = {}
        self._window = AsyncGenWindow(on_loop_stop=self.on_loop_stop)
        self._deaths = DeathWatch()
        self._follower = follower()

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Begin the window: follow guards, wrap the async generator hooks, watch the GC."""
        self._follower.sink = self.add
        self._follower.deaths = self._deaths
        self._window.install()
        self._deaths.start()

    def stop(self) -> None:
        """End the window (always called, even when the test errored)."""
        if self._follower.sink == self.add:
            self._follower.sink = None
            self._follower.deaths = None
        self._window.uninstall()
        self._deaths.stop()
        for record in self.records:
            record.release()  # strongly held ones (weak ones have nothing to release)
        self._follower.watch.held_now = 0  # all it held belonged to this check

    def add(self, records: list[Tracked]) -> None:
        """Take records to check at the end (from the guard follower or :meth:`track`)."""
        self.records.extend(records)

    def track(self, obj: object, name: str = "") -> None:
        """Track ``obj`` for this test (weakly, or held with a reference-count check)."""
        self.add([weak(obj, "tracked", self.name, name, self._deaths.died)
                  or held(obj, "tracked", self.name, name)])

    def begin_call(self) -> None:
        """The test body starts: generators started from now on are tracked."""
        self.in_call = True
        self._window.recording = self.settings.asyncgens

    def end_call(self) -> None:
        """The test body returned: last checkpoint before fixtures are torn down."""
        self.checkpoint()
        self.in_call = False
        self._window.recording = False

    def on_loop_stop(self) -> None:
        """An event loop stopped during the call: its tasks and generators are still intact."""
        if self.in_call and not self.repeating:
            self.checkpoint()

    # -- checks ------------------------------------------------------------------------------

    def _ignore(self) -> set[int]:
        """Our own holders: the record list and records (a held record refers to its object)."""
        return {id(self.records), id(self._evidence), *map(id, self.records)}

    def _alive(self) -> list[tuple[Tracked, Any]]:
        pairs = [(r, r.get()) for r in self.records]
        gens = self._window.suspended() if self.settings.asyncgens else []
        pairs.extend((_gen_record(g, self.name), g) for g in gens)
        return [(r, o) for r, o in pairs if o is not None]

    def checkpoint(self) -> None:
        """Remember which live objects a pending task holds and where generators wait."""
        if not self._alive():
            return
        gc.collect()
        ignore = self._ignore()
        for record, obj in self._alive():
            evidence = self._evidence.setdefault(id(obj), _Evidence())
            if evidence.searched:
                continue
            evidence.searched = True
            found, chain = search(obj, max_depth=self.settings.limits.chain_depth,
                                  timeout=self.settings.limits.chain_timeout,
                                  ignore=ignore | stack_ids())
            evidence.task_held = bool(found) and is_a(found[0], asyncio.Task)
            evidence.chain = chain.text if evidence.task_held else ""
            del found
            if record.kind == "asyncgen" or evidence.task_held:
                evidence.size = retained_size(obj)
                evidence.frame = frame_info(obj)
            del obj

    def leaks(self) -> list[Finding]:
        """Objects alive after teardown (or freed only by the loop's teardown), with evidence."""
        if any(r.alive() for r in self.records) or self._evidence or any(
                ref() is not None for ref in self._window.started):
            gc.collect()
        findings: list[Finding] = []
        seen: set[int] = set()
        for record in self.records:
            obj = record.get()
            if obj is not None:
                seen.add(id(obj))
                findings.append(self._finding(record, obj))
            del obj
        for ref in self._window.started:
            agen = ref()
            if agen is not None and id(agen) in self._evidence and id(agen) not in seen:
                seen.add(id(agen))
                findings.append(self._finding(_gen_record(agen, self.name), agen))
            del agen
        for record, obj in self._deaths.revived():
            if id(obj) not in seen:
                seen.add(id(obj))
                findings.append(self._finding(
                    Tracked("revived", record.cls, record.owner, record.label), obj,
                    note=REVIVED))
            del obj
        for key, evidence in self._evidence.items():
            if key not in seen and evidence.task_held:
                findings.append(Finding(
                    kind="task-held", type_name="", count=1, size=evidence.size,
                    chain=evidence.chain, note="held by a task still pending when the test "
                    "ended (never cancelled); freed only when the event loop was torn down"))
        for event in self._window.finalised if self.settings.asyncgens else ():
            inner, site = event["inner"], event["site"]
            findings.append(Finding(
                kind="unclosed-asyncgen", type_name=event["name"], count=1, size=None, chain="",
                note="finalised by the garbage collector without aclose(); "
                     + (f"iterated from {site}, " if site else "")
                     + f"suspended at {event['where']}"
                     + (f" (with the {len(inner)} generator(s) it was iterating: "
                        f"{', '.join(inner)})" if inner else "")))
        for error in self._window.errors:
            findings.append(Finding(kind="internal", type_name="", count=1, size=None, chain="",
                                    note=f"llm-guard check error ({error}); please report it"))
        return findings + self.growth

    def _finding(self, record: Tracked, obj: object, note: str = "") -> Finding:
        evidence = self._evidence.get(id(obj), _Evidence())
        limits = self.settings.limits
        if self.settings.graph_dir is not None:
            limits = Limits(**{**vars(limits), "graph_dir": self.settings.graph_dir})
        report = examine(obj, record, limits=limits, ignore=self._ignore(),
                         graph_name=_safe(f"{self.name}-{record.kind}-{id(obj)}"))
        if record.kind == "asyncgen" and evidence.frame is not None:
            note = (f"suspended at {evidence.frame['suspended_at']} when the test ended, "
                    "never closed by the code under test")
        size = report["size_bytes"]
        if evidence.size is not None:
            size = max(evidence.size, size or 0)
        owner = record.label if record.kind == "tracked" else record.owner
        return Finding(kind=record.kind, type_name=record.type_name, count=1, size=size,
                       chain=report["chain"]["text"], note=note, graph=report["graph"],
                       owner=owner if owner != self.name else "")

    # -- instance growth over repeated runs ------------------------------------------------------

    def count_before(self) -> dict[str, set[int]]:
        """Instances of the watched types after the warm-up run."""
        return growth.instances(self.settings.types)

    def count_after(self, before: dict[str, set[int]], runs: int) -> None:
        """Record a growth finding for each type that grew by more than ``max_growth``."""
        after = growth.instances(self.settings.types)
        for spec in self.settings.types:
            name = growth.spec_name(spec)
            grown = len(after[name]) - len(before[name])
            if grown <= self.settings.max_growth:
                continue
            sample = growth.new_instance(spec, before[name])
            report = None if sample is None else examine(
                sample, None, limits=self.settings.limits, ignore=self._ignore())
            del sample
            self.growth.append(Finding(
                kind="growth", type_name=name, count=grown,
                size=report["size_bytes"] if report else None,
                chain=report["chain"]["text"] if report else "",
                note=f"+{grown} instances over {runs} more runs of the test body "
                     f"(max_growth={self.settings.max_growth})"))

    def failure(self) -> str | None:
        """The failure message, or None when nothing leaked."""
        findings = self.leaks()
        return format_failure(self.name, findings) if findings else None


def _gen_record(agen: Any, owner: str) -> Tracked:
    record = weak(agen, "asyncgen", owner, where(agen))
    assert record is not None  # async generators always support weak references
    record.name = f"async_generator {agen.ag_code.co_qualname}"
    return record


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[-120:]
