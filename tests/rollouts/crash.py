"""Real Celery worker and beat processes for the crash-safety test, SIGKILLed when it says.

``Plane`` runs ``celery -A gpuplane worker`` processes (prefork, two children: two ticks may
really run at once) and ``celery -A gpuplane beat`` processes, each in its own process group, on
the test's PostgreSQL database, the simulated cluster's state file and REDIS_URL, and SIGKILLs
the current worker's and beat's whole groups when asked, as an OOM kill or a lost host would: no
``finally`` runs, nothing is acknowledged, beat's schedule file is left as the kill found it.
Every Redis key the processes write (messages, unacked bookkeeping, caches) carries a prefix of
this run's own, deleted at the end (tests/redis_scratch.py), so another test run or a ``make run``
on the same Redis is untouched.

The beat sends only the ticks of moves (the mover, the rollout reconciler, the consolidation
executor), every few tenths of a second (``TICKS``), to its own worker's queue: the settings module below narrows
gpuplane's beat schedule for these processes, and shortens the simulated cluster's delays
(``GPUPLANE_SIMULATED_DELAYS``) so that a trial takes seconds.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

BASE_DIR = Path(__file__).resolve().parents[2]
STEP_TIMEOUT_S = 60  # far above a step's real duration here: a timeout would hide a stuck step as a failure
# The ticks beat sends and their intervals (s); the others (telemetry, analysis, savings...) are
# no part of a move. The executor only asks for moves and reads their outcomes: less often.
TICKS = {"advance-moves": 0.2, "reconcile-rollouts": 0.2, "execute-consolidations": 1.0}
# Short, but a step still spans several ticks (a kill lands inside one): pods ready, MIG, plugin restart.
SIMULATED_DELAYS = {"pod_ready_delay_s": 0.3, "mig_reconfigure_s": 0.3, "plugin_restart_s": 0.3}
TICK_QUEUE_ENV = "GPUPLANE_CRASH_TICK_QUEUE"

SETTINGS_MODULE = '''
import json as _json
import os as _os

from gpuplane.settings import *  # noqa: F401,F403

# Every key this run writes (messages, unacked bookkeeping, caches) under its own prefix.
CELERY_BROKER_TRANSPORT_OPTIONS = {{**CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": "{prefix}"}}
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
for _cache in CACHES.values():
    _cache["KEY_PREFIX"] = "{prefix}"
GPUPLANE_SIMULATED_DELAYS = _json.loads(\'{delays}\')
# Beat: only the ticks of moves, each every few tenths of a second, to the queue of the worker
# started with it; a tick not started within five intervals is dropped (the next one does its work).
CELERY_BEAT_SCHEDULE = {{
    _name: {{**_entry, "schedule": _every,
             "options": {{"queue": _os.environ.get("{queue_env}", "celery"), "expires": _every * 5}}}}
    for _name, _entry in CELERY_BEAT_SCHEDULE.items() for _every in [{ticks!r}.get(_name)] if _every
}}
'''

# A beat process started ahead (a standby): Django and the tasks imported, it waits for "go" on
# its stdin, then runs the ``celery beat`` command itself; anything else (the test gone) ends it.
BEAT_LAUNCHER = '''
import sys
import django
django.setup()
from gpuplane.celery import app
app.loader.import_default_modules()
import celery.apps.beat, celery.beat
from celery.bin.celery import main
if sys.stdin.readline().strip() != "go":
    sys.exit(0)
sys.argv = ["celery", "-A", "gpuplane", "beat", "-l", "info", "--pidfile", sys.argv[1]]
sys.exit(main())
'''


def database_url() -> str:
    """The URL of the database this test process uses (the test database, not the one DATABASE_URL names)."""
    s = connection.settings_dict
    credentials = quote(s["USER"] or "", safe="") + (f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else "")
    return f"postgres://{credentials}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


class Plane:
    """The worker and the beat that run the ticks (``kill`` SIGKILLs both), and a standby pair.

    Each worker consumes a tick queue of its own (and the default queue, where placing enqueues
    its watch tasks), and the beat started with it sends the ticks there. A kill makes the
    standby pair current (a worker that never ran a tick, a beat that imported everything and
    waited), and starts the next standby pair: the trial resumes without waiting seconds for a
    process to boot, and a kill always hits the processes that were running the ticks.
    """

    def __init__(self, folder: Path, *, redis_url: str, prefix: str, state_path: str,
                 extra_env: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.prefix = prefix
        (folder / "crash_worker_settings.py").write_text(SETTINGS_MODULE.format(
            prefix=prefix, delays=json.dumps(SIMULATED_DELAYS), ticks=TICKS, queue_env=TICK_QUEUE_ENV))
        self.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_TASK_ALWAYS_EAGER")}
        self.env.update(
            DJANGO_SETTINGS_MODULE="crash_worker_settings",
            PYTHONPATH=os.pathsep.join([str(folder), str(BASE_DIR)]),
            PYTHONUNBUFFERED="1",
            DATABASE_URL=database_url(),
            REDIS_URL=redis_url,
            GPUPLANE_VAR_DIR=str(folder / "var"),  # one beat schedule file, left to each beat by the one killed
            GPUPLANE_CLUSTER="simulated",
            GPUPLANE_SIMULATED_STATE=state_path,
            GPUPLANE_ROLLOUT_STEP_TIMEOUT_S=str(STEP_TIMEOUT_S),
            **(extra_env or {}),
        )
        self.started = 0
        self.kills = 0
        self.standby = self._start_pair()
        self.current = self._promote()

    def kill(self) -> None:
        """SIGKILL the current worker's and beat's whole process groups (the main processes and the
        children running ticks), make the standby pair current and start a new standby pair."""
        worker, beat = self.current
        for process in (worker, beat):
            assert process.process.poll() is None, process.log_text()
        for process in (worker, beat):
            os.killpg(process.process.pid, signal.SIGKILL)
        for process in (worker, beat):
            process.process.wait(timeout=10)
        self.kills += 1
        self.current = self._promote()

    def ready(self) -> bool:
        """Both workers (the current one and the standby) have booted: a kill now hits processes
        that run ticks, and the next pair takes over at once."""
        return self.current[0].ready() and self.standby[0].ready()

    def wait_ready(self, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            assert time.monotonic() < deadline, f"the workers did not boot in {timeout_s} s\n{self.log_text()}"
            time.sleep(0.1)

    def stop(self) -> None:
        groups = [*self.current, *self.standby]
        for group in groups:
            group.terminate()
        for group in groups:
            group.stop()

    def log_text(self) -> str:
        worker, beat = self.current
        return f"{worker.log_text()}\n{beat.log_text()}"

    def _promote(self) -> tuple[Worker, Beat]:
        pair = self.standby
        pair[1].go()
        self.standby = self._start_pair()
        return pair

    def _start_pair(self) -> tuple[Worker, Beat]:
        self.started += 1
        queue = f"{self.prefix}ticks-{self.started}"
        env = {**self.env, TICK_QUEUE_ENV: queue}
        return Worker.start(self.started, self.folder, queue, env), Beat.start(self.started, self.folder, env)


class ProcessGroup:
    """A process started in a session (and so a process group) of its own, with its log file."""

    def __init__(self, process: subprocess.Popen, log: Path) -> None:
        self.process, self.log = process, log

    def terminate(self) -> None:
        """SIGTERM the group (a warm shutdown), without waiting."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def log_text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


class Worker(ProcessGroup):
    """One ``celery -A gpuplane worker`` process group: prefork with two children, so two ticks may run at once."""

    def __init__(self, process: subprocess.Popen, queue: str, log: Path) -> None:
        super().__init__(process, log)
        self.queue = queue

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

    def ready(self) -> bool:
        return " ready." in self.log_text()


class Beat(ProcessGroup):
    """One ``celery -A gpuplane beat`` process group, started as a standby (``BEAT_LAUNCHER``) until ``go``."""

    @classmethod
    def start(cls, number: int, folder: Path, env: dict[str, str]) -> Beat:
        log = folder / f"beat-{number}.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", BEAT_LAUNCHER, str(folder / f"beat-{number}.pid")],
                cwd=BASE_DIR, env=env, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, text=True,
            )
        return cls(process, log)

    def go(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def terminate(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()  # a standby that never got "go" ends here
        super().terminate()


@contextmanager
def flush_retried_on_deadlock() -> Iterator[None]:
    """The worker and beat keep ticking between trials (they outlive each trial), so the flush that
    ends a trial (TRUNCATE, table by table) can deadlock with a tick's transaction; PostgreSQL then
    aborts one of the two. The flush runs again, as a tick would: the tick has finished by then."""
    from django.db.backends.postgresql.operations import DatabaseOperations
    from django.db.utils import OperationalError

    execute = DatabaseOperations.execute_sql_flush

    def execute_with_retries(self: DatabaseOperations, sql_list: list[str]) -> None:
        for attempt in range(5):
            try:
                return execute(self, sql_list)
            except OperationalError as error:
                if "deadlock detected" not in str(error) or attempt == 4:
                    raise
                time.sleep(0.2)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "execute_sql_flush", execute_with_retries)
        yield
