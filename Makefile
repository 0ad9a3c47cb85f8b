# Two commands for a newcomer: `make train` and `make test`. Everything installs into .venv with
# the exact versions in constraints.txt. The pin chooses torch's version, not its build: PyPI's
# Linux wheel is the CUDA build (several GB with its nvidia packages); `make setup CPU=1` (or
# `make train CPU=1`) takes the CPU build from PyTorch's index instead. `make train` installs
# distrl and its own dependencies only (no extras); `make test` adds the EXTRAS below.
# `make setup` includes the mujoco extra (~11 MB of registry wheels, seconds to install), so the
# MuJoCo tasks and their Gymnasium parity tests run everywhere; `make setup EXTRAS=dev` leaves it
# out (those tests then skip, naming the reason) and `make setup-mujoco` adds it later.
# It includes the video extra too (imageio-ffmpeg 0.6.0: a 29 MB wheel with its own ffmpeg; 0.8.x
# is 68 MB), so `play --video` and its test run where the system has headless OpenGL (libEGL).
# And the export extra (onnx, onnxruntime: ~37 MB of wheels), for `distrl export --format onnx`,
# and the metaworld extra (metaworld 3.1.1 + scipy: ~40 MB of wheels, ~15 s here), so MT10, its
# scripted experts and their tests run everywhere.
# The docs extra (mkdocs, mkdocs-material, mkdocstrings: ~26 MB of wheels, most of it babel and
# mkdocs-material) is not among EXTRAS: `make docs` installs it the first time it runs, so
# `make train` and `make test` do not wait for it (tests/test_docs_site.py skips, naming the
# reason, until it is there; CI runs make docs before make test).
# The sweep extra (optuna 5.0.0 with SQLAlchemy, Alembic, colorlog: ~2 MB of wheels) is in
# EXTRAS, for `distrl sweep` and its tests.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
BASE_STAMP := $(VENV)/.installed-base
CPU     ?=
TORCH_INDEX := $(if $(CPU),--index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple,)
DOCS_STAMP := $(VENV)/.installed-docs
TASK    ?= cartpole
NPROC   ?= 2
ARGS    ?=
EXTRAS  ?= dev,mujoco,video,export,metaworld,sweep,multiagent

.PHONY: setup setup-mujoco train test test-long test-all test-fast lint format bench docs clean

setup: $(STAMP)

$(BASE_STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH_INDEX) -c constraints.txt -e .
	touch $(BASE_STAMP)

$(STAMP): $(BASE_STAMP)
	$(BIN)/pip install -q $(TORCH_INDEX) -c constraints.txt -e ".[$(EXTRAS)]"
	# the MinAtar reference of the parity tests; --no-deps: it imports without the plotting
	# stack (seaborn, pandas, scipy) its metadata asks for
	$(BIN)/pip install -q --no-deps -c constraints.txt minatar
	touch $(STAMP)

setup-mujoco: setup
	$(BIN)/pip install -q -c constraints.txt -e ".[mujoco]"

train: $(BASE_STAMP)
	$(BIN)/distrl train $(TASK) --nproc $(NPROC) $(ARGS)

test: setup
	$(BIN)/pytest -q --durations=20 -m "not long" $(ARGS)

test-long: setup
	$(BIN)/pytest -q --durations=20 -m long $(ARGS)

test-all: setup
	$(BIN)/pytest -q --durations=20 $(ARGS)

test-fast: setup
	$(BIN)/pytest -q -m "not slow and not long" $(ARGS)

lint: setup
	$(BIN)/ruff check src benchmarks tests examples peers docs/hooks.py
	$(BIN)/ruff format --check src benchmarks tests examples peers docs/hooks.py
	$(BIN)/mypy

format: setup
	$(BIN)/ruff check --fix src benchmarks tests examples peers docs/hooks.py
	$(BIN)/ruff format src benchmarks tests examples peers docs/hooks.py

# The site (mkdocs.yml) into site/: --strict makes every warning an error (a broken link or
# anchor, a docstring griffe cannot parse). NO_MKDOCS_2_WARNING quiets mkdocs-material's banner
# about its end of life (May 2027; fixes until then).
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install -q -c constraints.txt -e ".[docs]"
	touch $(DOCS_STAMP)

bench: setup
	$(BIN)/distrl bench throughput
	$(BIN)/distrl bench solve

clean:
	rm -rf $(VENV) runs bench_out site .pytest_cache .ruff_cache
