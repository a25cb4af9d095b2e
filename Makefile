# Two commands for a fresh clone: `make demo` and `make test`. Each creates (or reuses)
# the local virtual environment .venv first; nothing but Python is needed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

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

clean:
	rm -rf $(VENV) build dist .pytest_cache .mypy_cache .ruff_cache .benchmarks
