# The two commands a new user needs:  make demo   and   make test
# Both create .venv and install everything on first use.

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.PHONY: install demo test lint typecheck protos check-protos unit integration bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## The main job on the embedded default stack (etcd + 2 local clusters + coordinator + Spark).
demo: $(STAMP)
	$(BIN)/multikafka demo

## Everything CI runs: generated stubs current, lint, types, unit + integration + e2e tests.
test: $(STAMP) check-protos lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

protos: $(STAMP)
	$(PY) proto/generate.py

check-protos: $(STAMP)
	$(PY) proto/generate.py --check

unit: $(STAMP)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: $(STAMP)
	$(BIN)/pytest tests/integration tests/e2e $(PYTEST_ARGS)

bench: $(STAMP)
	cd benchmarks && ../$(PY) read_rate.py && ../$(PY) reconcile_latency.py && ../$(PY) failover_gap.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
