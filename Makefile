# Two commands for a newcomer: `make run` (set up and start the app) and `make test` (set up, check and
# run every test). Both first make sure the system packages of tools/system-packages.txt are there
# (installing them when root or passwordless sudo can, otherwise saying how and stopping), then create
# .venv when it is missing and install the project into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="tests/unit -x"` (the default runs every test).
PYTEST_ARGS ?=
SYSTEM_PACKAGES := PYTHON=$(PYTHON) bash tools/ensure_system_packages.sh
# The user guide is built here (ignored by git, like the rest of build/).
SITE_DIR ?= build/site

.PHONY: run test test-under-load setup bench clean docs lint system-packages-test system-packages-run gpu-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e ".[train,qlora,data,dev]"
	touch $(STAMP)

setup: $(STAMP)

system-packages-test:
	$(SYSTEM_PACKAGES) --for test

system-packages-run:
	$(SYSTEM_PACKAGES) --for run

# The system packages are checked first (the virtual environment needs python3-venv), in the recipe
# rather than as prerequisites so that `make -j` cannot reorder them.
run:
	$(MAKE) --no-print-directory system-packages-run
	$(MAKE) --no-print-directory setup
	$(BIN)/gpuplanner

# ruff (lint and format), the import-linter contracts of pyproject.toml, mypy ([tool.mypy]: strict on
# plan, history, export and app), the user guide with broken links and images as errors, then every test.
test:
	$(MAKE) --no-print-directory system-packages-test
	$(MAKE) --no-print-directory setup
	$(MAKE) --no-print-directory lint docs
	QT_QPA_PLATFORM=offscreen OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The timing-sensitive groups (launcher, the trainer's and the monitor's signal and stop tests, searches,
# the window's run panes) with two CPU hogs beside them (Python busy loops started here and killed by
# their ids when pytest ends, pass or fail): the suite must not depend on a quiet machine (issue 25).
UNDER_LOAD_TESTS ?= tests/launch tests/sweep tests/trainer/test_command_monitor.py tests/trainer/test_preemption.py \
	tests/trainer/test_startup_stop.py tests/trainer/test_startup_signal_paths.py tests/ui/test_run_controller.py \
	tests/ui/test_runs_pane.py tests/ui/test_run_failure.py tests/ui/test_shared_run_manager.py \
	tests/ui/test_one_run_two_front_ends.py tests/unit/test_time_budget.py
test-under-load: $(STAMP)
	@$(BIN)/python -c "while True: pass" & hog1=$$!; \
	$(BIN)/python -c "while True: pass" & hog2=$$!; \
	trap 'kill $$hog1 $$hog2 2>/dev/null' EXIT; \
	echo "two CPU hogs running (pids $$hog1 $$hog2)"; \
	QT_QPA_PLATFORM=offscreen OMP_NUM_THREADS=1 $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup \
		$(UNDER_LOAD_TESTS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python -m mypy

docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir $(SITE_DIR)

bench: $(STAMP)
	OMP_NUM_THREADS=1 $(BIN)/python tests/benchmarks/plan_speed.py
	OMP_NUM_THREADS=1 $(BIN)/python tests/benchmarks/history_ingest.py
	QT_QPA_PLATFORM=offscreen $(BIN)/python tests/benchmarks/ui_speed.py
	OMP_NUM_THREADS=2 PYTHONPATH=. $(BIN)/python tests/benchmarks/trainer_vs_hf.py

# The GPU check (issue 26, README "GPU check"): on a machine with one NVIDIA GPU, with the plain python3
# that has torch, transformers, peft and nvidia-ml-py (no virtual environment, no install): trains,
# plans and samples a fixed matrix and writes results.json and summary.md to GPU_CHECK_OUT.
GPU_CHECK_OUT ?= build/gpu-check
GPU_CHECK_TIME_LIMIT_S ?= 420
gpu-check:
	$(PYTHON) -m tests.gpu.check --out $(GPU_CHECK_OUT) --time-limit-s $(GPU_CHECK_TIME_LIMIT_S)

clean:
	rm -rf $(VENV) build dist .pytest_cache

# The wheel, the sdist and the frozen one-folder bundle (dist/gpuplanner/), checked by
# packaging/check_dist.sh in CI. PyInstaller comes with the `dev` extra.
.PHONY: dist
dist: $(STAMP)
	rm -rf dist/gpuplanner dist/gpuplanner-*.whl dist/gpuplanner-*.tar.gz
	$(BIN)/python -m build --no-isolation --sdist --wheel --outdir dist .
	QT_QPA_PLATFORM=offscreen $(BIN)/python packaging/build.py --dist dist
