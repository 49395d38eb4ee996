"""Leak-tool tests: ``pytester`` for the plugin, a configured inner pytest for async tests.

Importing this conftest loads objgraph and pympler, so plugin tests here do not measure import
lightness (``test_plugin_basics`` checks that in a subprocess).

``pytest_plugins = ["pytester"]`` is refused in a conftest below the rootdir, so the pytester
plugin is registered here when this folder is collected (its options get their defaults).
"""

from __future__ import annotations

import pytest

import llm_guard_sdk.leaks.testing.checker
from llm_guard_sdk.leaks import deps

# In-process inner runs drop the modules they imported; import the checker and the optional
# extras here once, so inner runs share them (re-importing numpy through pympler would warn).
deps.load_objgraph()
deps.load_asizeof()
assert llm_guard_sdk.leaks.testing.checker

INNER_INI = """
[pytest]
addopts = -p no:cacheprovider
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester whose inner runs use strict asyncio, warnings as errors, an anyio backend."""
    pytester.makeini(INNER_INI)
    pytester.makeconftest(
        "import pytest\n\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n")
    return pytester
