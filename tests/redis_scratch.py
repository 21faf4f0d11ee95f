"""A Celery app on the Redis of REDIS_URL whose every key carries a prefix of its own, deleted afterwards.

The suite's own settings use an in-memory broker (tests/settings.py). A test that needs a real
Redis broker takes `redis_celery_app()`: messages, queue bindings, unacked bookkeeping and task
results all live under `gpuplane-test-<random>:`, so neither a worker of a running `make run` on
the same Redis nor another test run sees them, and they are all deleted when the test is done.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery

# Every test's own Redis keys start with this (then a random part of their own).
SCRATCH_PREFIX = "gpuplane-test-"


def scratch_prefix() -> str:
    return f"{SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}:"


def delete_prefixed_keys(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@contextmanager
def redis_celery_app(name: str, *, results: bool = False) -> Iterator[Celery]:
    """A private app configured like the project's, on REDIS_URL, with prefixed keys; the project app stays current after."""
    import gpuplane.tasks  # noqa: F401  (shared tasks register on every app)
    from gpuplane.celery import app as project_app

    url = os.environ["REDIS_URL"]
    prefix = scratch_prefix()
    app = Celery(name)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(
        broker_url=url,
        broker_transport_options={"global_keyprefix": prefix, "visibility_timeout": 3600},
        task_always_eager=False,
        worker_hijack_root_logger=False,  # leave Django's logging alone for the other tests
    )
    if results:
        app.conf.update(result_backend=url, result_backend_transport_options={"global_keyprefix": prefix})
    try:
        yield app
    finally:
        app.close()
        # start_worker makes its app the current one; shared tasks resolve through the current app.
        project_app.set_current()
        project_app.set_default()
        delete_prefixed_keys(url, prefix)
