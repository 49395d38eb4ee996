"""Framework adapters, imported as ``llm_guard_sdk.adapters.<framework>``.

Each adapter imports its framework at the top and raises
:class:`~llm_guard_sdk.errors.MissingDependencyError` naming the extra to install.
"""
