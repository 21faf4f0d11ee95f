"""`make run` under load: does the embedded installation stay up with beat ticking every few seconds?

    python bench/make_run_soak.py --minutes 30 --tick 5 --port 8108 --load 2 --json

What it does (the steps of `make run`, on a throw-away var/ folder so the developer's is untouched):

1. `manage.py migrate`, `load_demo_cluster`, `load_demo_deployments`, `ensure_admin`, then
   `manage.py run_gpuplane` (web + worker + beat under the supervisor), with the embedded
   defaults (SQLite, the embedded broker: REDIS_URL and DATABASE_URL are removed) and the
   periodic tasks that tick every 5 s by default (rollout reconciler, consolidation executor,
   deployment watch) at `--tick` seconds.
2. Starts `--load` busy-loop processes (niced: another job on the machine) for the whole run.
3. Every 5 s checks that the supervisor is alive and the web server answers; reads the
   supervisor's output for restarts, exits, `Unrecoverable error` and `JSONDecodeError` lines
   and counts the tasks that succeeded.
4. After `--minutes`, stops everything (SIGINT, as Ctrl-C) and reports: seconds up, web checks
   passed and failed, tasks succeeded (by task), restarts, crash lines, load average.

Exit status 0 when the supervisor stayed up, the web answered every check, no process crashed
or was restarted and tasks ran; else 1. A shorter run with a faster tick is a test
(tests/gpuplane/test_make_run_soak.py); the 30-minute figures are in BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[1]
TICK_SETTINGS = ("GPUPLANE_ROLLOUT_RECONCILE_INTERVAL_S", "GPUPLANE_CONSOLIDATION_EXECUTE_INTERVAL_S",
                 "GPUPLANE_DEPLOYMENT_WATCH_INTERVAL_S")
SUCCEEDED = re.compile(r"Task ([\w.]+)\[[0-9a-f-]+\] succeeded")
# The tasks beat sends every tick (the settings above set their interval).
BEAT_TASKS = ("rollouts.tasks.reconcile_rollouts_task", "consolidation.tasks.execute_consolidations_task")
CRASH = re.compile(r"Unrecoverable error|JSONDecodeError|exited with status|started \w+ again|Traceback")


@dataclass
class SoakResult:
    seconds: float = 0.0
    tick_s: float = 0.0
    load_processes: int = 0
    supervisor_alive: bool = True
    web_checks_ok: int = 0
    web_checks_failed: int = 0
    tasks_succeeded: dict[str, int] = field(default_factory=dict)
    crash_lines: list[str] = field(default_factory=list)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def passed(self) -> bool:
        return (self.supervisor_alive and self.web_checks_failed == 0 and not self.crash_lines
                and sum(self.tasks_succeeded.values()) > 0)


def soak_env(var_dir: Path, tick_s: float) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env.update(GPUPLANE_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1", DJANGO_SETTINGS_MODULE="gpuplane.settings")
    env.update({name: str(max(1, round(tick_s))) for name in TICK_SETTINGS})
    return env


def prepare(env: dict[str, str], port: int) -> None:
    """What `make run` does before it execs the supervisor (its four manage.py commands, in one
    process: Django starts once)."""
    steps = [("migrate", "--noinput"), ("load_demo_cluster", "--if-empty"), ("load_demo_deployments", "--if-empty"),
             ("ensure_admin", "--url", f"http://127.0.0.1:{port}/accounts/login/")]
    code = ("import django, sys\ndjango.setup()\nfrom django.core.management import call_command\n"
            f"for step in {steps!r}:\n    call_command(*step)\n")
    subprocess.run([sys.executable, "-c", code], cwd=BASE_DIR, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)


def web_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=10) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def beat_task_ran(succeeded: Counter[str]) -> bool:
    return any(succeeded[name] for name in BEAT_TASKS)


def start_load(processes: int) -> list[subprocess.Popen[bytes]]:
    """Busy loops at nice 10: another job that keeps every core busy."""
    return [subprocess.Popen([sys.executable, "-c", "import os; os.nice(10)\nwhile True: pass"])
            for _ in range(processes)]


def soak(minutes: float, tick_s: float, port: int, load: int, log: Path | None = None,
         until_ticks: int = 0) -> SoakResult:
    """Run `make run`'s processes for `minutes` beside `load` busy processes; what happened. With
    `until_ticks`, go on (up to 90 s more) until beat's reconcile task succeeded that many times:
    on a machine busier than `load` (a test suite beside it) ticks only come slower."""
    var_dir = Path(tempfile.mkdtemp(prefix="gpuplane-soak-var-"))
    env = soak_env(var_dir, tick_s)
    result = SoakResult(tick_s=tick_s, load_processes=load)
    succeeded: Counter[str] = Counter()
    loaders: list[subprocess.Popen[bytes]] = []
    server: subprocess.Popen[str] | None = None
    log_file = open(log, "w") if log else None  # noqa: SIM115 - closed in finally
    try:
        prepare(env, port)
        loaders = start_load(load)
        server = subprocess.Popen([sys.executable, "manage.py", "run_gpuplane", "--port", str(port)], cwd=BASE_DIR,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True)

        def read() -> None:
            assert server is not None and server.stdout is not None
            for line in server.stdout:
                if log_file:
                    log_file.write(line)
                found = SUCCEEDED.search(line)
                if found:
                    succeeded[found.group(1)] += 1
                if CRASH.search(line):
                    result.crash_lines.append(line.rstrip())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        started = time.monotonic()
        # Starting up: the clock starts once the web answers and the worker has run a task from beat
        # (on a loaded machine Django's imports alone take seconds in each of the three processes).
        while time.monotonic() - started < 120 and not (web_answers(port) and beat_task_ran(succeeded)):
            time.sleep(1)
        started = time.monotonic()
        def running() -> bool:
            elapsed = time.monotonic() - started
            ticked = succeeded[BEAT_TASKS[0]] >= until_ticks
            return elapsed < minutes * 60 or (not ticked and elapsed < minutes * 60 + 90)

        while running():
            time.sleep(5)
            if server.poll() is not None:
                result.supervisor_alive = False
                break
            if web_answers(port):
                result.web_checks_ok += 1
            else:
                result.web_checks_failed += 1
        result.seconds = round(time.monotonic() - started, 1)
        result.load_average = os.getloadavg()
    finally:
        for loader in loaders:
            loader.kill()
            loader.wait()
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        if log_file:
            log_file.close()
        shutil.rmtree(var_dir, ignore_errors=True)
    result.tasks_succeeded = dict(succeeded)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--tick", type=float, default=5, help="seconds between the 5-second beat tasks' runs")
    parser.add_argument("--port", type=int, default=8108)
    parser.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy-loop processes (default: one per core)")
    parser.add_argument("--log", type=Path, help="write the supervisor's output here")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = soak(args.minutes, args.tick, args.port, args.load, args.log)
    report = {**asdict(result), "passed": result.passed, "cpus": os.cpu_count()}
    print(json.dumps(report, indent=None if args.json else 2))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
