# gpuplane: two commands on a fresh machine (see README.md, "Quick start", and docs/operations.md).
#
#   make run    web + Celery worker + Celery beat on http://$(HOST):$(PORT); Ctrl-C stops all three
#   make test   the whole test suite (pass-through: DATABASE_URL, REDIS_URL, PYTEST_ARGS, PYTEST_WORKERS=0 for one process)
#
# Only python3 is needed: both create .venv on first use. `make run` installs requirements.txt
# (what runs: no test or lint tool), `make test` requirements-dev.txt (that plus the test and
# lint tools); each again only when its file is newer than its stamp file in .venv.

PYTHON      ?= python3
VENV        ?= .venv
HOST        ?= 127.0.0.1
PORT        ?= 8000
PYTEST_ARGS ?=
# pytest-xdist workers: one per core; a test file stays on one worker (its module fixtures built once).
PYTEST_WORKERS ?= auto

PY    := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed
DEV_STAMP := $(VENV)/.requirements-dev-installed
PIP_INSTALL := $(PY) -m pip install --disable-pip-version-check --progress-bar off

.DEFAULT_GOAL := help
.PHONY: help install install-dev run test

help:
	@echo "make run    start gpuplane on http://$(HOST):$(PORT) (HOST=, PORT= to change); Ctrl-C stops it"
	@echo "make test   run the test suite (PYTEST_ARGS='-k name' to narrow it)"

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): requirements.txt | $(PY)
	$(PIP_INSTALL) -r requirements.txt
	touch $@

$(DEV_STAMP): requirements-dev.txt $(STAMP)
	$(PIP_INSTALL) -r requirements-dev.txt
	touch $@

install: $(STAMP)

install-dev: $(DEV_STAMP)

run: install
	@# Before anything is printed: a busy port must not come after the login, with nothing to use it.
	@$(PY) manage.py run_gpuplane --check-port --host $(HOST) --port $(PORT)
	$(PY) manage.py migrate --noinput
	@# Hashed, compressed copies of the static files (whitenoise serves them with a long cache);
	@# files already compressed under the same content hash are kept, so later runs take a second.
	$(PY) manage.py collectstatic --noinput --verbosity 0
	@# The demo cluster gives a new user something to look at; --if-empty keeps their own data.
	@# It lives in the simulator only: a real cluster is never seeded.
	@if [ "$${GPUPLANE_CLUSTER:-simulated}" = kubernetes ]; then \
		echo "(GPUPLANE_CLUSTER=kubernetes: no demo cluster)"; \
	elif $(PY) manage.py help --commands | grep -qx load_demo_cluster; then \
		echo "$(PY) manage.py load_demo_cluster --if-empty"; \
		$(PY) manage.py load_demo_cluster --if-empty; \
		echo "$(PY) manage.py load_demo_deployments --if-empty"; \
		$(PY) manage.py load_demo_deployments --if-empty; \
	else \
		echo "(no load_demo_cluster command in this version: starting with an empty cluster)"; \
	fi
	$(PY) manage.py ensure_admin --url http://$(HOST):$(PORT)/accounts/login/
	@# exec: the supervisor replaces the shell, so Ctrl-C and SIGTERM reach it directly.
	exec $(PY) manage.py run_gpuplane --host $(HOST) --port $(PORT)

test: install-dev
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)
