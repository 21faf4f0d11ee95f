"""Real Celery worker processes for the crash-safety test, and the beat it plays.

``Workers`` runs ``celery -A gpuplane worker`` processes (prefork, two children: two ticks may
really run at once), each in its own process group, on the test's PostgreSQL database, the
simulated cluster's state file and REDIS_URL, and SIGKILLs the current one's whole group when
asked, as an OOM kill or a lost host would: no ``finally`` runs, nothing is acknowledged. Every
Redis key the workers and the beat write (messages, unacked bookkeeping, caches) carries a
prefix of this run's own, deleted at the end (tests/redis_scratch.py), so another test run or a
``make run`` on the same Redis is untouched.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from celery import Celery
from django.db import connection

from rollouts.tasks import reconcile_rollouts_task
from scheduler.tasks import advance_moves_task

BASE_DIR = Path(__file__).resolve().parents[2]
STEP_TIMEOUT_S = 60  # far above a step's real duration here: a timeout would hide a stuck step as a failure

SETTINGS_MODULE = '''
from gpuplane.settings import *  # noqa: F401,F403

# Every key this run writes (messages, unacked bookkeeping, caches) under its own prefix.
CELERY_BROKER_TRANSPORT_OPTIONS = {{**CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": "{prefix}"}}
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
for _cache in CACHES.values():
    _cache["KEY_PREFIX"] = "{prefix}"
'''


def database_url() -> str:
    """The URL of the database this test process uses (the test database, not the one DATABASE_URL names)."""
    s = connection.settings_dict
    credentials = quote(s["USER"] or "", safe="") + (f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else "")
    return f"postgres://{credentials}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Workers:
    """The worker that runs the ticks (``kill`` SIGKILLs it), a standby, and the beat (``tick``).

    Each worker consumes a tick queue of its own (and the default queue, where placing enqueues
    its watch tasks); the beat sends ticks to the current worker's only. A kill makes the standby
    (a fresh process that never ran a tick) current, and starts the next standby: the rollout
    resumes without waiting seconds for a worker to boot, and a kill always hits the worker that
    was running the ticks.
    """

    def __init__(self, folder: Path, *, redis_url: str, prefix: str, state_path: str) -> None:
        self.folder = folder
        self.prefix = prefix
        (folder / "crash_worker_settings.py").write_text(SETTINGS_MODULE.format(prefix=prefix))
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_TASK_ALWAYS_EAGER")}
        self.env.update(
            DJANGO_SETTINGS_MODULE="crash_worker_settings",
            PYTHONPATH=os.pathsep.join([str(folder), str(BASE_DIR)]),
            PYTHONUNBUFFERED="1",
            DATABASE_URL=database_url(),
            REDIS_URL=redis_url,
            GPUPLANE_VAR_DIR=str(folder / "var"),
            GPUPLANE_CLUSTER="simulated",
            GPUPLANE_SIMULATED_STATE=state_path,
            GPUPLANE_ROLLOUT_STEP_TIMEOUT_S=str(STEP_TIMEOUT_S),
        )
        self.beat = Celery("crash-test-beat", set_as_current=False)  # the suite's own tasks stay off this broker
        self.beat.conf.update(broker_url=redis_url, broker_transport_options={"global_keyprefix": prefix})
        self.started = 0
        self.current = self._start()
        self.standby = self._start()

    def kill(self) -> None:
        """SIGKILL the current worker's whole process group (the main process and the children
        running ticks), make the standby current and start a new standby."""
        killed = self.current
        assert killed.process.poll() is None, killed.log_text()
        os.killpg(killed.process.pid, signal.SIGKILL)
        killed.process.wait(timeout=10)
        self.current, self.standby = self.standby, self._start()

    def stop(self) -> None:
        for worker in (self.current, self.standby):
            worker.stop()
        self.beat.close()

    def tick(self, expires_s: float) -> None:
        """What beat sends: one reconcile tick and one mover tick (the rollout's moves), each
        expiring before the next is due."""
        self.beat.send_task(reconcile_rollouts_task.name, queue=self.current.queue, expires=expires_s)
        self.beat.send_task(advance_moves_task.name, queue=self.current.queue, expires=expires_s)

    def log_text(self) -> str:
        return self.current.log_text()

    def _start(self) -> Worker:
        self.started += 1
        return Worker.start(self.started, self.folder, f"{self.prefix}ticks-{self.started}", self.env)


class Worker:
    """One ``celery -A gpuplane worker`` process group: prefork with two children, so two ticks may run at once."""

    def __init__(self, process: subprocess.Popen, queue: str, log: Path) -> None:
        self.process, self.queue, self.log = process, queue, log

    @classmethod
    def start(cls, number: int, folder: Path, queue: str, env: dict[str, str]) -> Worker:
        log = folder / f"worker-{number}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "gpuplane", "worker", "-l", "info", "-P", "prefork", "-c", "2",
                 "-Q", f"{queue},celery", "-n", f"crash-{number}@%h",
                 "--without-gossip", "--without-mingle", "--without-heartbeat"],
                cwd=BASE_DIR, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )
        return cls(process, queue, log)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""
