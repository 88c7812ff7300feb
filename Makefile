# Quick start: `make run` (agent on the embedded SQLite store) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
RUN_ARGS ?=
DASHBOARD_ARGS ?=
# What `make run`, `make test` and CI install, pinned: the versions the suite last passed
# with, so a fresh machine resolves what CI did. Users' installs keep pyproject's ranges;
# `make lock` re-resolves on purpose (then run `make test` and commit the file).
CONSTRAINTS := constraints.txt
# `make run` installs every extra a node can use (the vendor libraries amd and gaudi need
# their vendor's driver stack, so they are left to `pip install 'joulestat[amd]'`);
# `make test` installs dev, which pulls the same extras plus the test tools (pyproject).
RUN_EXTRAS := dashboard,demo,pdf,postgres,nvidia

.PHONY: run test test-fast test-unit test-store test-system install dev lint docs clean lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip -c $(CONSTRAINTS)

# Editable installs in setuptools' strict mode: a tree of links to the sources
# (build/__editable__.*) on sys.path, so that a folder named joulestat in the current
# directory (the checkout itself, seen from its parent) cannot shadow the package, as it
# did under the default mode's import hook (issue 46). A module added or removed needs
# the tree made again: the installs depend on the package's folders, whose times change
# then (tests/conftest.py stops a run whose tree misses a module).
STRICT = --config-settings editable_mode=strict
PACKAGE_DIRS := $(shell find agent dashboard migrations -type d -not -name __pycache__)

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) $(PACKAGE_DIRS) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[$(RUN_EXTRAS)]' $(STRICT) -c $(CONSTRAINTS)
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(CONSTRAINTS) $(PACKAGE_DIRS) | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]' $(STRICT) -c $(CONSTRAINTS)
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

## The tests, in tiers (docs/testing.md says which to run when). TEST_WORKERS processes
## run side by side (pytest-xdist); tests that share a costly module fixture stay on one
## (xdist_group). PYTEST_ARGS is passed on: `make test-fast PYTEST_ARGS='-k store'`.
TEST_WORKERS ?= 4
FAST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadgroup

## The whole suite: unit, store (SQLite and PostgreSQL) and system tiers. CI runs this.
test: dev
	$(BIN)/pytest $(XDIST) $(PYTEST_ARGS)

## After each change: the in-process tiers, unit and the SQLite half of store (no process,
## no socket: tests/helpers/isolation.py checks it), in about a minute.
test-fast: dev
	$(BIN)/pytest -n $(FAST_WORKERS) tests/unit tests/store -m "not postgres" $(PYTEST_ARGS)

test-unit: dev
	$(BIN)/pytest -n $(FAST_WORKERS) tests/unit $(PYTEST_ARGS)

## Every store scenario on SQLite and on PostgreSQL (one server for the run).
test-store: dev
	$(BIN)/pytest -n $(FAST_WORKERS) tests/store $(PYTEST_ARGS)

## Real agents, CLI processes, Chromium, the wheel, the examples.
test-system: dev
	$(BIN)/pytest $(XDIST) tests/system $(PYTEST_ARGS)

lint: dev
	$(BIN)/ruff check agent dashboard migrations tests benchmarks

## Regenerate docs/metrics.md from the metric catalog.
docs: install
	$(BIN)/python -m joulestat.outputs.metric_catalog > docs/metrics.md

## Re-resolve the test environment's pins (newest releases within pyproject's ranges).
## torch is pinned by version only: where pip finds the CPU build (its +cpu wheel, as on
## our CI machines) it takes it; elsewhere add PyTorch's CPU index first
## (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu), or pip brings CUDA.
lock:
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/pip install --quiet '.[dev]'
	{ echo "# Pins for make test and .ci/run (pip constraints), made by make lock on $$(date -u +%F)."; \
	  echo "# Update on purpose: make lock, make test, commit."; \
	  .lock-venv/bin/pip freeze --all --exclude joulestat --exclude setuptools \
	  | sed 's/^torch==\(.*\)+cpu$$/torch==\1/'; } > $(CONSTRAINTS)
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info build
