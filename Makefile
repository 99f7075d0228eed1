# specreview: `make demo` runs the main job on the embedded default; `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
EXTRAS ?= dev

export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/specreview
export CELERY_BROKER_URL ?= redis://127.0.0.1:6379/15
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test lint venv serve clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	@touch $(STAMP)

venv: $(STAMP)

# The embedded default: SQLite under var/, the filesystem broker, a worker the demo starts itself.
demo: $(STAMP)
	env -u DATABASE_URL -u CELERY_BROKER_URL $(PY) manage.py migrate --noinput -v 0
	env -u DATABASE_URL -u CELERY_BROKER_URL $(PY) manage.py demo $(DEMO_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check console workers tests bench
	$(VENV)/bin/mypy console workers
	$(PY) manage.py makemigrations --check --dry-run

test: $(STAMP)
	bin/ensure-services
	bin/ensure-chromium
	$(MAKE) --no-print-directory lint
	$(VENV)/bin/pytest $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pytest collected no tests: that is a failure here" >&2; exit 1; fi; exit $$rc

clean:
	rm -rf var/broker var/specreview.sqlite3
