"""Package discovery, the one build setting pyproject.toml cannot express.

Every ``llm_guard_sdk*`` package under ``llm_guard_sdk/`` is found automatically (new
subpackages need no entry here), and the top-level ``adapters/`` folder is installed as
``llm_guard_sdk.adapters``: ``[tool.setuptools.packages.find]`` cannot rename a folder, and an
explicit ``packages`` list in pyproject.toml would have to name every subpackage. Everything
else (metadata, extras, entry points, package data) is in pyproject.toml.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["llm_guard_sdk", "llm_guard_sdk.*"]),
              "llm_guard_sdk.adapters"],
    package_dir={"llm_guard_sdk.adapters": "adapters"},
)
