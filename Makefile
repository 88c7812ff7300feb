# Quick start: `make run` (agent on the embedded SQLite store) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_ARGS ?=

.PHONY: run test install dev lint docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed

dev: $(VENV)/.installed-dev

## Start the agent (metrics on 127.0.0.1:9464, store in the user data dir). Ctrl-C stops it.
run: install
	@echo "joulestat agent: metrics at http://127.0.0.1:9464/metrics (Ctrl-C to stop)"
	$(BIN)/joulestat agent $(RUN_ARGS)

## Run the whole test suite.
test: dev
	$(BIN)/pytest $(PYTEST_ARGS)

lint: dev
	$(BIN)/ruff check agent dashboard migrations tests benchmarks

## Regenerate docs/metrics.md from the metric catalog.
docs: install
	$(BIN)/python -m agent.sinks.metric_catalog > docs/metrics.md

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
