"""Settings of the test suite: gpuplane's own, with every broker, cache and var/ file the suite's own.

A developer's `make run` (or CI's services) may be using var/, Redis database 0 or the
embedded broker under var/celery-broker/ while the suite runs. A message a test enqueues there
would later be consumed by that worker, against a database row that no longer exists. So:

- var/ is a scratch folder created here and removed when the process exits (SQLite test
  databases, the embedded broker's folders, the file cache, beat's schedule);
- the Celery broker is kombu's in-memory transport: a task a test enqueues (an on-commit watch,
  say) stays in this process and disappears with it;
- the cache is in-memory too, even when REDIS_URL is set.

Tests that need a real Redis build their own Celery app or worker processes from REDIS_URL,
with key prefixes of their own that they delete (tests/redis_scratch.py). The session check in
tests/conftest.py (tests/leaks.py) fails the run if any of this is bypassed.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Read by tests/conftest.py: the developer's var/ folder, whose broker the suite must not touch.
DEVELOPER_VAR_DIR = os.environ.get("GPUPLANE_VAR_DIR", "")

SCRATCH_VAR_DIR = tempfile.mkdtemp(prefix="gpuplane-tests-var-")
atexit.register(shutil.rmtree, SCRATCH_VAR_DIR, ignore_errors=True)
# Before gpuplane.settings reads it; child processes that tests start inherit it unless they pass their own.
os.environ["GPUPLANE_VAR_DIR"] = SCRATCH_VAR_DIR

from gpuplane.settings import *  # noqa: E402,F401,F403

CELERY_BROKER_URL = "memory://"
CELERY_BROKER_TRANSPORT = None  # not the embedded broker's class (gpuplane/broker.py): memory's own
CELERY_BROKER_TRANSPORT_OPTIONS: dict = {}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "gpuplane-tests"}}
CACHES["ratelimit"] = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "gpuplane-tests-ratelimit"}
CACHES["fleet"] = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "gpuplane-tests-fleet"}
# The database is the suite's time-series store whatever the developer exports; the Prometheus
# tests (tests/nodes/test_prometheus_store.py) set the URL of the Prometheus they start.
GPUPLANE_PROMETHEUS_URL = ""
