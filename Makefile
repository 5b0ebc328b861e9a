# Two commands for a newcomer: `make run` (set up and start the app) and `make test` (set up and run
# every test). Both create .venv when it is missing and install the project into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: run test setup bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[train,dev]"
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/gpuplanner

test: $(STAMP)
	QT_QPA_PLATFORM=offscreen OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

bench: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python tests/benchmarks/plan_speed.py
	OMP_NUM_THREADS=1 $(BIN)/python tests/benchmarks/history_ingest.py
	QT_QPA_PLATFORM=offscreen $(BIN)/python tests/benchmarks/ui_speed.py
	OMP_NUM_THREADS=2 PYTHONPATH=. $(BIN)/python tests/benchmarks/trainer_vs_hf.py

clean:
	rm -rf $(VENV) build dist .pytest_cache

# The wheel, the sdist and the frozen one-folder bundle (dist/gpuplanner/), checked by
# packaging/check_dist.sh in CI. PyInstaller comes with the `dev` extra.
.PHONY: dist
dist: $(STAMP)
	rm -rf dist/gpuplanner dist/gpuplanner-*.whl dist/gpuplanner-*.tar.gz
	$(BIN)/python -m build --no-isolation --sdist --wheel --outdir dist .
	QT_QPA_PLATFORM=offscreen $(BIN)/python packaging/build.py --dist dist
