"""Package discovery and the optional C hot path: what pyproject.toml cannot express.

Every ``llm_guard_sdk*`` package under ``llm_guard_sdk/`` is found automatically (new
subpackages need no entry here), and the top-level ``adapters/`` folder is installed as
``llm_guard_sdk.adapters``: ``[tool.setuptools.packages.find]`` cannot rename a folder, and an
explicit ``packages`` list in pyproject.toml would have to name every subpackage.

``llm_guard_sdk._hotpath`` (``llm_guard_sdk/_hotpath.c``) is the per-chunk hot path in C. It is
optional: where it cannot be compiled (no compiler, another Python implementation) the install
still succeeds and the pure-Python code, which is the reference, runs instead
(``LLM_GUARD_PURE_PYTHON=1`` forces that at run time). Everything else (metadata, extras, entry
points, package data) is in pyproject.toml.
"""

import platform

from setuptools import Extension, find_packages, setup

ext_modules = []
if platform.python_implementation() == "CPython":
    ext_modules.append(Extension("llm_guard_sdk._hotpath", ["llm_guard_sdk/_hotpath.c"],
                                 optional=True, extra_compile_args=["-O2"]))

setup(
    packages=[*find_packages(include=["llm_guard_sdk", "llm_guard_sdk.*"]),
              "llm_guard_sdk.adapters"],
    package_dir={"llm_guard_sdk.adapters": "adapters"},
    ext_modules=ext_modules,
)
