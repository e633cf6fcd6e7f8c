# Two commands from a bare Python 3.11: `make demo` and `make test`. Both bootstrap .venv and are safe to re-run.
# The interpreter: the first of these on the PATH that is Python 3.11 or newer (pyproject.toml's requires-python), so
# that a machine whose python3 is older but which has, say, python3.12 beside it still works; PYTHON=... overrides.
PYTHON_NAMES := python3.11 python3.12 python3.13 python3.14 python3
NEW_ENOUGH := "import sys; sys.exit(sys.version_info < (3, 11))"
PYTHON ?= $(shell for p in $(PYTHON_NAMES); do \
  command -v $$p >/dev/null 2>&1 && $$p -c $(NEW_ENOUGH) 2>/dev/null && { command -v $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
# Every pip here installs into .venv: a user-wide "user = true" (pip.conf, or PIP_USER=1) would make it refuse
# ("Can not perform a '--user' install. User site-packages are not visible in this virtualenv").
export PIP_USER := 0
# The venv's own packages, not a user's PYTHONPATH (a cluster's module system sets one; its entries come first and an
# older numpy there would be what is installed against and tested) or PYTHONHOME (which breaks a venv).
unexport PYTHONPATH PYTHONHOME
# make test runs the suite on this many processes (pytest-xdist): every core this process may run on (its affinity:
# a taskset, a container's cpuset), up to 4 (each worker imports torch); the tests that time this host's kernels
# (marked serial in tests/conftest.py) run after, in one process.
TEST_WORKERS ?= $(shell $(or $(PYTHON),python3) -c "import os; print(min(4, len(os.sched_getaffinity(0))))" 2>/dev/null || echo 1)

# A .venv that cannot be installed into is made again: one whose interpreter no longer starts (its base Python was
# removed or upgraded away), is older than 3.11 (an earlier make ran with an older PYTHON) or has no pip (a venv
# module without ensurepip, as Debian's python3.11 without python3.11-venv, left it half made). Otherwise it would
# keep every later make failing the same way.
VENV_CHECK := import sys, importlib.util; print(sys.version_info >= (3, 11) and importlib.util.find_spec("pip") is not None)
ifneq ($(wildcard $(BIN)/python),)
ifneq ($(shell $(BIN)/python -c '$(VENV_CHECK)' 2>/dev/null),True)
$(info make: $(VENV) has no working Python 3.11 or newer with pip; making it again)
$(shell rm -rf $(VENV))
endif
endif

.PHONY: demo test lint format bench clean torchrec

$(BIN)/python:
	@test -n "$(PYTHON)" && "$(PYTHON)" -c $(NEW_ENOUGH) 2>/dev/null || { \
	  echo "make: no Python 3.11 or newer: PYTHON is '$(PYTHON)' (searched the PATH for $(PYTHON_NAMES))" \
	    "(fix: install Python 3.11 or newer, or run make PYTHON=/path/to/python3.11)" >&2; exit 2; }
	"$(PYTHON)" -m venv $(VENV) || { rm -rf $(VENV); exit 1; }
	$(BIN)/python -m pip install --quiet --upgrade pip

# Stamps re-run the install whenever pyproject.toml changes.
# After installing, compile the engine's numba kernels into their cache (dlrmsim/warmup.py), so that the first
# simulation a user runs does not pay it.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	$(BIN)/python -m dlrmsim.warmup
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m dlrmsim.warmup
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed
	$(BIN)/dlrmsim demo

test: $(VENV)/.installed-test
	$(BIN)/ruff check dlrmsim tests benchmarks
	$(BIN)/ruff format --check dlrmsim tests benchmarks
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal -m "not slow and not serial"
	$(BIN)/python -m pytest -p no:xdist -m "not slow and serial"

# TorchRec validation target (optional). torchrec declares the CUDA fbgemm-gpu, so it goes in with --no-deps
# beside the CPU fbgemm; torch and fbgemm-gpu-cpu must be a matched pair (1.8.0 is built against torch 2.13).
torchrec: $(VENV)/.installed-test
	$(BIN)/python -m pip install --quiet "torch==2.13.0" "fbgemm-gpu-cpu==1.8.0" tensordict "torchmetrics==1.0.3" tqdm pyre-extensions iopath
	$(BIN)/python -m pip install --quiet --no-deps "torchrec==1.8.0"

lint: $(VENV)/.installed-test
	$(BIN)/ruff check dlrmsim tests benchmarks
	$(BIN)/ruff format --check dlrmsim tests benchmarks

# Apply the formatter (make lint and make test only check it).
format: $(VENV)/.installed-test
	$(BIN)/ruff format dlrmsim tests benchmarks
	$(BIN)/ruff check --fix dlrmsim tests benchmarks

bench: $(VENV)/.installed
	$(BIN)/python -m benchmarks.bench_engine
	$(BIN)/python -m benchmarks.bench_training
	$(BIN)/python -m benchmarks.bench_serving

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
