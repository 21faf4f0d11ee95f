"""Two worker processes given the same telemetry poll store it once: the slot claim holds across processes.

Two beats (or a re-delivered message) send the poll of one interval slot more than once; the task
claims the slot in the shared cache (`lifecycle.locks.claim_slot`) so only the first run stores
samples. A lock held per process would pass a test with one worker, so here two separate
`celery -A gpuplane worker` processes each get their own queue and the test sends the same poll
to both, several times, at once. Nothing depends on timing: the poll interval is a day, so every
message falls in the same slot (or, across midnight UTC, the next one), and the test counts what
each message did (task results) and what the shared SQLite database holds.

Redis (REDIS_URL) carries the messages, the results and the slot claim; every key carries a
prefix of this run's own and is deleted at the end (tests/redis_scratch.py).
"""
from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from celery import Celery

from tests.redis_scratch import delete_prefixed_keys, scratch_prefix

BASE_DIR = Path(__file__).resolve().parents[2]
INTERVAL_S = 86_400  # one slot for the whole test, whatever the load on the machine
SENDS_PER_WORKER = 3
WORKERS = ("worker-a", "worker-b")

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: the slot claim needs a shared Redis"),
]

SETTINGS_MODULE = '''
from gpuplane.settings import *  # noqa: F401,F403

# Every key this run writes (messages, results, the slot claim) under its own prefix.
CELERY_BROKER_TRANSPORT_OPTIONS = {{**CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": "{prefix}"}}
CELERY_RESULT_BACKEND = REDIS_URL
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {{"global_keyprefix": "{prefix}"}}
for _cache in CACHES.values():  # the default cache, and the fleet figures a poll refreshes
    _cache["KEY_PREFIX"] = "{prefix}"
'''

SETUP_DATABASE = '''
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from nodes.models import GPU, Node
node = Node.objects.create(name="beat-node", gpu_model="H100-SXM5-80GB", gpu_count=2)
for index in range(2):
    GPU.objects.create(node=node, index=index, uuid=f"GPU-beat-{index}", model="H100-SXM5-80GB", memory_mib=81559)
'''


def start_worker_process(queue: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gpuplane", "worker", "-l", "info", "-P", "solo",
             "-Q", queue, "-n", f"{queue}@%h", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=BASE_DIR, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for(log: Path, pattern: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if re.search(pattern, log.read_text()):
            return
        time.sleep(0.1)
    raise AssertionError(f"{log.name} never logged {pattern!r}:\n{log.read_text()}")


def test_two_worker_processes_store_one_poll_per_slot(tmp_path):
    redis_url = os.environ["REDIS_URL"]
    prefix = scratch_prefix()
    (tmp_path / "beat_test_settings.py").write_text(SETTINGS_MODULE.format(prefix=prefix))
    database = tmp_path / "db.sqlite3"
    base_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_TASK_ALWAYS_EAGER")}
    base_env.update(
        DJANGO_SETTINGS_MODULE="beat_test_settings",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(BASE_DIR)]),
        PYTHONUNBUFFERED="1",
        DATABASE_URL=f"sqlite:///{database}",
        REDIS_URL=redis_url,
        GPUPLANE_TELEMETRY_POLL_INTERVAL_S=str(INTERVAL_S),
        GPUPLANE_TELEMETRY_SOURCE="simulated",
    )

    def env_for(name: str) -> dict[str, str]:
        var_dir = tmp_path / name
        return {**base_env, "GPUPLANE_VAR_DIR": str(var_dir), "GPUPLANE_SIMULATED_STATE": str(var_dir / "cluster.json")}

    setup = subprocess.run([sys.executable, "-c", SETUP_DATABASE], cwd=BASE_DIR, env=env_for("setup"),
                           capture_output=True, text=True, timeout=120)
    assert setup.returncode == 0, setup.stderr

    sender = Celery("beat-test-sender")
    sender.conf.update(
        broker_url=redis_url, broker_transport_options={"global_keyprefix": prefix},
        result_backend=redis_url, result_backend_transport_options={"global_keyprefix": prefix},
    )
    queues = {name: f"{prefix}{name}" for name in WORKERS}
    logs = {name: tmp_path / f"{name}.log" for name in WORKERS}
    processes: list[subprocess.Popen] = []
    outcomes: dict[str, list[dict]] = {}
    try:
        for name in WORKERS:
            processes.append(start_worker_process(queues[name], env_for(name), logs[name]))
        for name in WORKERS:
            wait_for(logs[name], r"ready\.", timeout_s=90)
        # Sent before any result is read: both workers race for the slot.
        sent = {name: [sender.send_task("nodes.tasks.poll_metrics_task", queue=queues[name])
                       for _ in range(SENDS_PER_WORKER)] for name in WORKERS}
        outcomes = {name: [result.get(timeout=90) for result in results] for name, results in sent.items()}
    finally:
        for process in processes:
            stop(process)
        sender.close()
        delete_prefixed_keys(redis_url, prefix)

    report = f"{outcomes}\n" + "\n".join(f"--- {name}\n{log.read_text()}" for name, log in logs.items())
    stored = [outcome["slot"] for results in outcomes.values() for outcome in results if "stored" in outcome]
    skipped = [outcome for results in outcomes.values() for outcome in results if outcome.get("skipped")]
    slots = {outcome["slot"] for results in outcomes.values() for outcome in results}

    # Every message ran, in the worker of its queue: two processes tried the same slot.
    assert all(len(results) == SENDS_PER_WORKER for results in outcomes.values()), report
    # One effective poll per slot, whichever process won; every other message was skipped.
    assert sorted(Counter(stored).values()) == [1] * len(slots), report
    assert len(skipped) == 2 * SENDS_PER_WORKER - len(slots), report
    assert all(outcome["reason"] == "slot already polled" for outcome in skipped), report
    # The database agrees: one set of samples per effective poll, two GPUs each.
    with sqlite3.connect(database) as connection:
        distinct_ts, rows = connection.execute("SELECT COUNT(DISTINCT ts), COUNT(*) FROM nodes_gpusample").fetchone()
    assert (distinct_ts, rows) == (len(slots), 2 * len(slots)), report
