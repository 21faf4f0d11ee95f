"""Two Celery beats side by side give one telemetry poll per interval, not two (on Redis).

Real processes: two `celery -A gpuplane beat` and one worker, against the Redis of REDIS_URL (its
database 5, a queue and cache key prefix of this run's own, so parallel runs and a running
`make run` are not disturbed), with the poll interval shortened to 2 s, sharing a temporary
SQLite database that has two GPUs. Each beat keeps its schedule file in its own var dir, as two
beat pods would. After ~10 s the worker's log says how many polls each beat sent and which of
them took effect (stored samples) and which were skipped because their slot was already polled.
"""
from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

BASE_DIR = Path(__file__).resolve().parents[2]
INTERVAL_S = 2
RUN_S = 10
REDIS_DB = 5

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="REDIS_URL is not set: no Redis to run beats against"),
]

SETTINGS_MODULE = '''
from gpuplane.settings import *  # noqa: F401,F403

# This run's own queue and cache keys: another run on the same Redis must not steal them.
CELERY_TASK_DEFAULT_QUEUE = "gpuplane-beat-test-{run_id}"
CACHES["default"]["KEY_PREFIX"] = "gpuplane-beat-test-{run_id}"
# Only the poll: inventory sync and rollup have nothing to do here.
CELERY_BEAT_SCHEDULE = {{"poll-metrics": CELERY_BEAT_SCHEDULE["poll-metrics"]}}
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


def redis_url_for_db(url: str, db: int) -> str:
    return urlsplit(url)._replace(path=f"/{db}").geturl()


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "gpuplane", *args],
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


def test_two_beats_give_one_poll_per_interval(tmp_path):
    run_id = uuid.uuid4().hex[:12]
    (tmp_path / "beat_test_settings.py").write_text(SETTINGS_MODULE.format(run_id=run_id))
    database = tmp_path / "db.sqlite3"
    base_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_TASK_ALWAYS_EAGER")}
    base_env.update(
        DJANGO_SETTINGS_MODULE="beat_test_settings",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(BASE_DIR)]),
        PYTHONUNBUFFERED="1",
        DATABASE_URL=f"sqlite:///{database}",
        REDIS_URL=redis_url_for_db(os.environ["REDIS_URL"], REDIS_DB),
        GPUPLANE_TELEMETRY_POLL_INTERVAL_S=str(INTERVAL_S),
        GPUPLANE_TELEMETRY_SOURCE="simulated",
    )

    def env_for(name: str) -> dict[str, str]:
        var_dir = tmp_path / name
        return {**base_env, "GPUPLANE_VAR_DIR": str(var_dir), "GPUPLANE_SIMULATED_STATE": str(var_dir / "cluster.json")}

    setup = subprocess.run([sys.executable, "-c", SETUP_DATABASE], cwd=BASE_DIR, env=env_for("setup"),
                           capture_output=True, text=True, timeout=120)
    assert setup.returncode == 0, setup.stderr

    worker_log, beat_logs = tmp_path / "worker.log", [tmp_path / "beat-a.log", tmp_path / "beat-b.log"]
    processes: list[subprocess.Popen] = []
    try:
        processes.append(start(["worker", "-l", "info", "-P", "solo", "--without-gossip", "--without-mingle",
                                "--without-heartbeat"], env_for("worker"), worker_log))
        wait_for(worker_log, r"ready\.", timeout_s=60)
        for name, log in zip(("beat-a", "beat-b"), beat_logs, strict=True):
            processes.append(start(["beat", "-l", "info"], env_for(name), log))
        for log in beat_logs:
            wait_for(log, r"beat: Starting", timeout_s=60)
        started = time.monotonic()
        time.sleep(RUN_S)
        for beat in processes[1:]:
            stop(beat)
        elapsed_s = time.monotonic() - started
        time.sleep(1.5)  # let the worker finish what the beats sent last
    finally:
        for process in reversed(processes):
            stop(process)
        _clean_redis(base_env["REDIS_URL"], run_id)

    worker = worker_log.read_text()
    sent = [len(re.findall(r"Sending due task poll-metrics", log.read_text())) for log in beat_logs]
    effective_slots = [int(slot) for slot in re.findall(r"poll_metrics_task\[[^]]+\] succeeded in [^:]+: \{'source'.*'slot': (\d+)\}", worker)]
    skipped = len(re.findall(r"poll_metrics_task\[[^]]+\] succeeded in [^:]+: \{'skipped': True, 'reason': 'slot already polled'", worker))
    report = f"sent per beat {sent}, effective slots {effective_slots}, skipped {skipped}, elapsed {elapsed_s:.1f} s\n{worker}"

    # Both beats really sent the poll, about once per interval each.
    expected = elapsed_s / INTERVAL_S
    assert all(count >= expected - 2 for count in sent), report
    # One effective poll per interval slot, never two ...
    assert len(effective_slots) == len(set(effective_slots)), report
    assert abs(len(effective_slots) - expected) <= 1.5, report
    # ... and the other beat's message in each slot was received and skipped, not lost or doubled.
    assert skipped >= sum(sent) - len(effective_slots) - 2, report

    # The database agrees: one set of samples per effective poll, two GPUs each.
    with sqlite3.connect(database) as connection:
        distinct_ts, rows = connection.execute("SELECT COUNT(DISTINCT ts), COUNT(*) FROM nodes_gpusample").fetchone()
    assert distinct_ts == len(effective_slots), report
    assert rows == 2 * len(effective_slots), report


def _clean_redis(url: str, run_id: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=f"*{run_id}*"))
    if keys:
        client.delete(*keys)
