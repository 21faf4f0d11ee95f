"""Celery smoke checks: a real task goes through a real broker to a real worker.

- Embedded broker (always): kombu's filesystem transport under GPUPLANE_VAR_DIR, which is what
  `make run` uses. One process sends, a separate worker process consumes.
- Redis (when REDIS_URL is set, as in CI): an in-process worker started with Celery's own
  testing helper, and the task's return value read back through a Redis result backend.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]


def embedded_env(var_dir: Path) -> dict[str, str]:
    # No REDIS_URL: this test is about the filesystem broker even when CI provides Redis.
    # No DATABASE_URL: the worker must not touch the shared PostgreSQL database of CI.
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(DJANGO_SETTINGS_MODULE="gpuplane.settings", GPUPLANE_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1")
    return env


def test_the_embedded_broker_carries_a_task_from_one_process_to_a_worker_in_another(tmp_path):
    var_dir = tmp_path / "var"
    env = embedded_env(var_dir)
    queue_dir = var_dir / "celery-broker" / "queue"

    # 1. A process that only sends, then exits: the message has to outlive it, on disk.
    sent = subprocess.run(
        [sys.executable, "-c",
         "import django; django.setup()\n"
         "from gpuplane.tasks import ping_task\n"
         "print(ping_task.delay().id)"],
        cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
    )
    assert sent.returncode == 0, sent.stderr
    task_id = sent.stdout.strip().splitlines()[-1]
    assert len(list(queue_dir.iterdir())) == 1, "the message should wait on disk for a worker"

    # 2. A worker started afterwards, in another process, picks it up and runs the task.
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "gpuplane", "worker", "-l", "info", "-P", "solo",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=BASE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    succeeded = re.compile(rf"Task gpuplane\.tasks\.ping_task\[{re.escape(task_id)}\] succeeded in [\d.e-]+s: 'pong'")
    log: list[str] = []
    try:
        deadline = time.monotonic() + 60
        assert worker.stdout is not None
        while time.monotonic() < deadline:
            line = worker.stdout.readline()
            if not line:
                break  # the worker died; the assertion below shows its log
            log.append(line)
            if succeeded.search(line):
                break
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()

    assert any(succeeded.search(line) for line in log), "".join(log)
    assert list(queue_dir.iterdir()) == [], "a consumed message must not be delivered again"


@pytest.mark.redis
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: no Redis broker to test against")
def test_a_worker_on_redis_runs_the_ping_task_and_returns_its_result():
    from celery.contrib.testing.worker import start_worker

    from tests.redis_scratch import redis_celery_app

    # A private app, configured like the project's but with a result backend, so the global
    # app (no results, by design) is left untouched; every key it writes carries a prefix of its
    # own and is deleted afterwards, so a worker of a running `make run` on the same Redis
    # neither steals the message nor finds leftovers.
    queue = f"gpuplane-smoke-{uuid.uuid4().hex}"
    with redis_celery_app("gpuplane-redis-smoke", results=True) as app:
        with start_worker(app, pool="solo", perform_ping_check=False, queues=[queue], shutdown_timeout=30):
            result = app.tasks["gpuplane.tasks.ping_task"].apply_async(queue=queue)
            assert result.get(timeout=30) == "pong"
        assert result.state == "SUCCESS"
