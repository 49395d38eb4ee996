"""The adapters' first names still work for one release, each with a DeprecationWarning.

One test per old name: it warns, names its replacement, and still does the job. No
``from __future__ import annotations`` here: the routes below annotate with names local to
each test, which FastAPI could not resolve from strings.
"""

import os
from typing import Any

import pytest
from fastapi import Depends, FastAPI
from litestar import Litestar, get

from llm_guard_sdk import GuardMiddleware, Session
from llm_guard_sdk.adapters import fastapi as fastapi_adapter
from llm_guard_sdk.adapters import litestar as litestar_adapter
from llm_guard_sdk.context import SCOPE_KEY
from tests.support import client_for, make_guard

pytestmark = pytest.mark.anyio


def old_name(module: Any, old: str, new: str) -> Any:
    """Fetch ``old`` from ``module`` as ``from module import old`` does; check the warning."""
    with pytest.warns(DeprecationWarning, match=rf"\.{old} is deprecated .* use .*\.{new}$"):
        value = getattr(module, old)
    assert value is getattr(module, new)
    return value


def test_unknown_names_are_still_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'SessionDepp'"):
        fastapi_adapter.SessionDepp  # noqa: B018
    assert "SessionDep" not in fastapi_adapter.__all__


# -- FastAPI --------------------------------------------------------------------------------


async def whoami(app: FastAPI) -> Any:
    async with client_for(app) as client:
        response = await client.get("/whoami")
    return response.json()


def guarded_fastapi() -> FastAPI:
    app = FastAPI()
    fastapi_adapter.install(app, guard=make_guard())
    return app


async def test_fastapi_session_dep() -> None:
    with pytest.warns(DeprecationWarning, match="use llm_guard_sdk.adapters.fastapi.GuardSes"):
        from llm_guard_sdk.adapters.fastapi import SessionDep
    app = guarded_fastapi()

    @app.get("/whoami")
    async def route(session: SessionDep) -> dict[str, str]:
        return {"id": session.id}

    assert (await whoami(app))["id"].startswith("sess-")


async def test_fastapi_optional_session_dep() -> None:
    OptionalSessionDep = old_name(fastapi_adapter, "OptionalSessionDep",
                                  "OptionalGuardSessionDep")
    app = FastAPI()  # no middleware: no session, and no error

    @app.get("/whoami")
    async def route(session: OptionalSessionDep) -> dict[str, bool]:
        return {"session": session is not None}

    assert await whoami(app) == {"session": False}


async def test_fastapi_get_session() -> None:
    get_session = old_name(fastapi_adapter, "get_session", "get_guard_session")
    app = guarded_fastapi()

    @app.get("/whoami")
    async def route(session: Session = Depends(get_session)) -> dict[str, str]:  # noqa: B008
        return {"id": session.id}

    assert (await whoami(app))["id"].startswith("sess-")


async def test_fastapi_get_optional_session() -> None:
    get_optional_session = old_name(fastapi_adapter, "get_optional_session",
                                    "get_optional_guard_session")
    app = guarded_fastapi()

    @app.get("/whoami")
    async def route(session: Session | None = Depends(get_optional_session),  # noqa: B008
                    ) -> dict[str, bool]:
        return {"session": session is not None}

    assert await whoami(app) == {"session": True}


# -- Litestar -------------------------------------------------------------------------------


async def test_litestar_session_dep() -> None:
    SessionDep = old_name(litestar_adapter, "SessionDep", "GuardSessionDep")

    @get("/whoami", sync_to_thread=False)
    def route(session: SessionDep) -> dict[str, str]:
        return {"id": session.id}

    app = Litestar([route], plugins=[litestar_adapter.LLMGuardPlugin(guard=make_guard())],
                   logging_config=None)
    async with client_for(app) as client:
        assert (await client.get("/whoami")).json()["id"].startswith("sess-")


def test_litestar_provide_session() -> None:
    provide_session = old_name(litestar_adapter, "provide_session", "provide_guard_session")
    session = Session("http")
    assert provide_session({SCOPE_KEY: session}) is session
    with pytest.raises(RuntimeError, match="no llm-guard session"):
        provide_session({})


def test_litestar_provide_optional_session() -> None:
    provide_optional_session = old_name(litestar_adapter, "provide_optional_session",
                                        "provide_optional_guard_session")
    session = Session("http")
    assert provide_optional_session({SCOPE_KEY: session}) is session
    assert provide_optional_session({}) is None


# -- Channels -------------------------------------------------------------------------------


def test_channels_guard() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "examples.channels_app.settings")
    from llm_guard_sdk.adapters import channels as channels_adapter

    guard = old_name(channels_adapter, "guard", "guard_application")

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not called")

    chosen = make_guard()
    app = guard(inner, guard=chosen)
    assert isinstance(app, GuardMiddleware) and app.guard is chosen
    with pytest.warns(DeprecationWarning):
        assert channels_adapter.guard(app) is app  # already guarded: returned as it is
