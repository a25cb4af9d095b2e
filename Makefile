# Two commands for a fresh clone: `make demo` and `make test`. Each creates (or reuses)
# the local virtual environment .venv first; nothing but Python is needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench docs clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade 'pip>=25.1'
	$(BIN)/python -m pip install --quiet -e . --group dev
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python -m ratelimit bench

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy benchmarks

test: lint
	$(BIN)/pytest

bench: $(BIN)/.installed
	$(BIN)/pytest benchmarks --benchmark-enable --benchmark-columns=min,median,ops -p no:randomly

# The docs site (mkdocs.yml, docs/) into site/; --strict turns every warning (a broken
# link, a missing anchor, a docstring griffe cannot read) into a failure. Offline.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

clean:
	rm -rf $(VENV) build dist site .pytest_cache .mypy_cache .ruff_cache .benchmarks
