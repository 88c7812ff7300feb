# Quick start: `make run` (agent on the embedded SQLite store) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_ARGS ?=
DASHBOARD_ARGS ?=

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

## Start the agent and the dashboard on the SQLite store in the user data dir.
## Metrics: http://127.0.0.1:9464/metrics, job API: :9465, dashboard: http://127.0.0.1:8501.
## Ctrl-C stops both (the agent counts its last partial tick and flushes the store).
run: install
	@$(BIN)/joulestat db upgrade > /dev/null
	@trap 'kill $$dash 2>/dev/null; wait $$dash 2>/dev/null' EXIT; \
	$(BIN)/joulestat dashboard $(DASHBOARD_ARGS) & dash=$$!; \
	echo "joulestat: agent and dashboard starting; their URLs follow (Ctrl-C stops both). Empty store? Run $(BIN)/joulestat demo in another terminal (2 minutes of measured jobs)"; \
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
