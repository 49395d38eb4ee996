"""The guard's public extension points: what extensions and integrations register with.

A mixin of :class:`~llm_guard_sdk.guard.Guard`, kept apart so the guard module holds only the
coordination (tick, close sequence, admission) and this one only the registration surface.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal, get_args

from llm_guard_sdk.actions import Admission, AdmissionCheck
from llm_guard_sdk.extensions import Extension, load_extension
from llm_guard_sdk.monitors.base import MemorySource
from llm_guard_sdk.monitors.sampler import Sampler
from llm_guard_sdk.registry import SessionRegistry
from llm_guard_sdk.session import Session
from llm_guard_sdk.status import StatusSection

TickHook = Callable[[Any], Awaitable[None] | None]
"""Called with the guard after every tick's actions (sync or async)."""
CloseHook = Callable[[Session], object]
StopHook = Callable[[], object]
"""Called once the guard's sampler stopped (app shutdown)."""


@dataclass(frozen=True, slots=True)
class ControlBody:
    """A control reply that is not JSON: the bytes as they are, with their content type.

    For the Prometheus text format and the dashboard's HTML page.
    """

    body: bytes
    content_type: str


@dataclass(frozen=True, slots=True)
class ControlStream:
    """A streamed control reply (server-sent events), closed whichever way it ends.

    The chunks are sent until they end or the client leaves; the iterator is closed either way
    (``aclose()`` when it has one).

    For the dashboard's live feed: the request stays open as long as the page does, so the
    guard listens for ``http.disconnect`` beside it rather than learning at the next write.
    """

    chunks: AsyncIterable[bytes]
    content_type: str = "text/event-stream"


ControlResult = tuple[int, Any] | tuple[int, Any, Mapping[str, str]]
ControlHandler = Callable[[dict[str, list[str]]], ControlResult | Awaitable[ControlResult]]
"""Serves one control route: ``handler(query) -> (status, body[, headers])``, sync or async.

``body`` is a JSON-serialisable document, a :class:`ControlBody` or a :class:`ControlStream`.
"""
ControlAccess = Literal["status", "token", "public"]
"""Who may call a control route.

``"status"``: the bearer token when one is configured, else loopback clients whose request
carries no forwarding header. ``"token"``: only the bearer token, even on loopback (a route
that costs a full heap walk). ``"public"``: anyone (the readiness probe, which says nothing).
"""


@dataclass(frozen=True, slots=True)
class ControlRoute:
    """A control route's handler and who may call it; calling it calls the handler."""

    handler: ControlHandler
    access: ControlAccess = "status"
    login: bool = False
    """Also a browser login: ``GET <route>?token=T`` checks T and sets the auth cookie (see
    :mod:`llm_guard_sdk.asgi.control`), because a browser cannot send a bearer header when it
    navigates or opens an ``EventSource``."""

    def __call__(self, query: dict[str, list[str]]) -> ControlResult | Awaitable[ControlResult]:
        """Serve ``query`` (so a route can be called like the handler it wraps)."""
        return self.handler(query)


class ExtensionPoints:
    """``add_*`` registration methods and the extensions kept by name."""

    registry: SessionRegistry
    sampler: Sampler
    admission: Admission

    def __init__(self) -> None:
        self.tick_hooks: list[TickHook] = []
        self.close_hooks: list[CloseHook] = []
        self.stop_hooks: list[StopHook] = []
        self.status_sections: dict[str, StatusSection] = {}
        self.control_routes: dict[str, ControlRoute] = {}
        self._extensions: dict[str, Any] = {}

    def add_extension(self, extension: Extension | str) -> Any:
        """Set up ``extension`` (or the built-in one of that name) once; returns the one kept.

        A second extension of the same name is not set up: the first one is returned.
        """
        if isinstance(extension, str):
            if extension in self._extensions:
                return self._extensions[extension]
            extension = load_extension(extension)
        if extension.name in self._extensions:
            return self._extensions[extension.name]
        extension.setup(self)
        return self._extensions.setdefault(extension.name, extension)

    def extension(self, name: str) -> Any | None:
        """The extension kept under ``name``, or None."""
        return self._extensions.get(name)

    @property
    def extensions(self) -> Mapping[str, Any]:
        """Extensions by name, read-only: register with :meth:`add_extension`."""
        return MappingProxyType(self._extensions)

    def add_source(self, source: MemorySource, *, evicts: bool = True) -> None:
        """Plug in another pressure source; the policy acts on the highest evicting one.

        Args:
            source: The source; sampled with the others every ``sample_interval``.
            evicts: False makes the source advisory: it is read and reported in status, but its
                pressure never sets the guard's level, so it never sheds or evicts anything.
                Its owner acts on it (``guard.sampler.pressure_of(name)``), as the vLLM
                integration refuses new engine requests while the KV cache is full. Right for
                pools the backend manages itself, which cannot OOM the process.
        """
        self.sampler.add(source, evicts=evicts)

    def add_admission_check(self, check: AdmissionCheck) -> None:
        """Add a check run per new session; a returned string sheds it with that reason."""
        self.admission.checks.append(check)

    def add_tick_hook(self, hook: TickHook) -> None:
        """Run ``hook(guard)`` on every sample, after the actions (sync or async)."""
        self.tick_hooks.append(hook)

    def add_close_hook(self, hook: CloseHook) -> None:
        """Call ``hook(session)`` when a session closes, before it drops what it owns.

        The leak sweeper uses this to take weak references to the session, its streams and its
        attachments, which should all die shortly after.
        """
        self.close_hooks.append(hook)

    def add_stop_hook(self, hook: StopHook) -> None:
        """Call ``hook()`` when the guard stops (app shutdown), after its sampler stopped.

        The metrics mark the worker dead here in Prometheus multiprocess mode.
        """
        self.stop_hooks.append(hook)

    def add_stream_hook(self, hook: Callable[[Session, Any], None]) -> None:
        """Call ``hook(session, stream)`` whenever a guarded stream opens on a session."""
        self.registry.stream_hooks.append(hook)

    def add_status_section(self, name: str, section: StatusSection) -> None:
        """Expose ``section()`` under ``name`` in the status JSON."""
        self.status_sections[name] = section

    def add_control_route(self, suffix: str, handler: ControlHandler, *,
                          access: ControlAccess = "status", login: bool = False) -> None:
        """Serve ``handler(query) -> (status, json[, headers])`` at ``<route_prefix><suffix>``.

        ``access`` says who may call it (see :data:`ControlAccess`); the default is the status
        route's auth. ``login`` makes the route a browser's way in (``?token=``, then a cookie:
        :attr:`ControlRoute.login`); only for ``"status"`` routes.
        """
        if access not in get_args(ControlAccess):
            raise ValueError(f"access must be one of {get_args(ControlAccess)}, got {access!r}")
        if login and access != "status":
            raise ValueError(f"login=True needs access='status', got {access!r}")
        self.control_routes[suffix] = ControlRoute(handler, access, login)
