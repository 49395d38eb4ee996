from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["c", "python"])
def hot_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the compiled hot path and again with the pure-Python one.

    Connections and streams read ``hotpath.native`` when they start, so the swap covers
    everything the test builds. The C run is skipped, with the reason, where it was not built.
    """
    from llm_guard_sdk import hotpath

    if request.param == "python":
        monkeypatch.setattr(hotpath, "native", None)
    elif hotpath.native is None:
        pytest.skip("llm_guard_sdk._hotpath is not built (no C compiler at install time)")
    return str(request.param)
