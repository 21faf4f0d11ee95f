"""`manage.py run_gpuplane`, the supervisor behind `make run`.

The end-to-end test starts the real thing (gunicorn, Celery worker, Celery beat) on a free port
and a private var/ directory; the others drive `Supervisor` with tiny Python children so that
they can provoke crashes and stubborn processes cheaply. Processes are tracked through /proc
(no psutil): a child runs in its own process group, so the group id finds its grandchildren.
"""
from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from gpuplane.management.commands.run_gpuplane import ProcessSpec, Supervisor, bind_address, process_specs, public_url

BASE_DIR = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"started (\w+) \(pid (\d+)\)")


# --- /proc helpers ------------------------------------------------------------------------

def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of `pid`, or None when it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()  # the command name may contain spaces
    return fields[0], int(fields[2])


def running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a zombie has exited; only its reaping is left)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def group_members(pgid: int) -> set[int]:
    """Live processes whose process group is `pgid`."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None and stat[0] != "Z" and stat[1] == pgid:
                members.add(int(entry.name))
    return members


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def python_child(name: str, code: str) -> ProcessSpec:
    return ProcessSpec(name, (sys.executable, "-c", code))


# --- process definitions ------------------------------------------------------------------

def test_the_three_processes_are_web_worker_and_beat():
    specs = process_specs("127.0.0.1", 8123, embedded_broker=True, beat_schedule="/srv/var/celerybeat-schedule")

    assert [spec.name for spec in specs] == ["web", "worker", "beat"]
    web, worker, beat = (" ".join(spec.argv) for spec in specs)
    assert "gunicorn gpuplane.wsgi:application --bind 127.0.0.1:8123" in web
    assert "celery -A gpuplane worker" in worker and "--concurrency 2" in worker
    assert "celery -A gpuplane beat" in beat and "-s /srv/var/celerybeat-schedule" in beat
    # Children run with this interpreter, i.e. the project's virtual environment.
    assert all(spec.argv[0] == sys.executable for spec in specs)


def test_the_worker_skips_multi_worker_chatter_only_on_the_embedded_broker():
    embedded = process_specs("127.0.0.1", 8000, embedded_broker=True, beat_schedule="s")[1]
    redis = process_specs("127.0.0.1", 8000, embedded_broker=False, beat_schedule="s")[1]

    assert {"--without-gossip", "--without-mingle", "--without-heartbeat"} <= set(embedded.argv)
    assert "--without-gossip" not in redis.argv


def test_addresses_for_binding_and_for_people():
    assert bind_address("::1", 8000) == "[::1]:8000"
    assert bind_address("0.0.0.0", 8000) == "0.0.0.0:8000"
    assert public_url("0.0.0.0", 8000, "/admin/login/") == "http://127.0.0.1:8000/admin/login/"
    assert public_url("::", 9000) == "http://[::1]:9000/"
    assert public_url("10.1.2.3", 8000) == "http://10.1.2.3:8000/"


# --- supervisor behaviour with stand-in children ------------------------------------------

def test_a_child_that_keeps_dying_is_restarted_a_few_times_then_the_supervisor_gives_up():
    out = io.StringIO()
    supervisor = Supervisor(
        [
            python_child("steady", "import time; print('up', flush=True); time.sleep(60)"),
            python_child("flaky", "import sys, time; time.sleep(0.5); print('giving up'); sys.exit(3)"),
        ],
        out,
        stop_timeout_s=10,
        max_restarts=2,
        restart_delay_s=0.2,
    )

    status = supervisor.run()

    assert status == 1
    steady = supervisor.children[0]
    assert steady.popen.returncode is not None and not running(steady.pid)
    log = out.getvalue()
    assert log.count("flaky    | giving up") == 3  # output is echoed line by line, name first
    assert "flaky exited with status 3; starting it again in 0.2 s (restart 1 of at most 2 in 600 s)" in log
    assert "flaky exited with status 3; starting it again in 0.4 s (restart 2 of at most 2 in 600 s)" in log
    assert "flaky exited with status 3 (3 exits in 600 s); giving up: stopping the others" in log
    assert "all processes stopped" in log


def test_a_child_that_crashes_once_is_started_again_and_the_rest_keep_running(tmp_path):
    out = io.StringIO()
    marker = tmp_path / "crashed-once"
    # The first run crashes (as kombu's torn-message JSONDecodeError did); the second stays up.
    crash_once = (f"import os, sys, time; p = {str(marker)!r}\n"
                  "if not os.path.exists(p): open(p, 'w').close(); print('boom', flush=True); sys.exit(1)\n"
                  "print('UP', flush=True); time.sleep(60)")
    supervisor = Supervisor(
        [python_child("steady", "import time; print('up', flush=True); time.sleep(60)"),
         ProcessSpec("worker", (sys.executable, "-c", crash_once))],
        out, stop_timeout_s=10, restart_delay_s=0.1,
    )
    pids: dict[str, int] = {}

    def stop_once_up() -> None:
        deadline = time.monotonic() + 20
        while "worker   | UP" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        pids.update({child.name: child.pid for child in supervisor.children})
        supervisor.request_stop()

    stopper = threading.Thread(target=stop_once_up)
    stopper.start()
    status = supervisor.run()
    stopper.join()

    log = out.getvalue()
    assert status == 0, log
    assert "worker exited with status 1; starting it again in 0.1 s (restart 1 of at most 3 in 600 s)" in log
    assert f"started worker again (pid {pids['worker']})" in log
    assert "steady exited" not in log  # the others were never stopped
    assert not any(running(pid) for pid in pids.values())


def test_it_announces_ready_only_after_every_child_printed_its_ready_line():
    out = io.StringIO()
    announced_when: list[str] = []
    supervisor = Supervisor(
        [
            ProcessSpec("fast", (sys.executable, "-c", "print('UP', flush=True); import time; time.sleep(60)"), r"^UP$"),
            ProcessSpec(
                "slow",
                (sys.executable, "-c", "import time; time.sleep(1); print('UP', flush=True); time.sleep(60)"),
                r"^UP$",
            ),
        ],
        out,
        stop_timeout_s=5,
        on_ready=lambda: announced_when.append(out.getvalue()),
    )
    stopper = threading.Timer(4, supervisor.request_stop)
    stopper.start()
    try:
        status = supervisor.run()
    finally:
        stopper.cancel()

    assert status == 0  # a requested stop is a clean exit
    assert len(announced_when) == 1
    assert "fast     | UP" in announced_when[0] and "slow     | UP" in announced_when[0]


def test_stubborn_children_and_their_grandchildren_are_killed_after_the_timeout():
    # Ignores SIGINT/SIGTERM and has a grandchild (like gunicorn's workers) in its group.
    stubborn = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('GRANDCHILD-PID', grandchild.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    out = io.StringIO()
    supervisor = Supervisor([python_child("stubborn", stubborn)], out, stop_timeout_s=0.5)
    supervisor.start()
    announced = re.compile(r"GRANDCHILD-PID (\d+)")
    assert wait_until(lambda: announced.search(out.getvalue()) is not None, 20), out.getvalue()
    grandchild = int(announced.search(out.getvalue()).group(1))
    child = supervisor.children[0]

    began = time.monotonic()
    supervisor.stop(signal.SIGINT)

    assert time.monotonic() - began < 5
    assert child.popen.returncode == -signal.SIGKILL
    assert wait_until(lambda: not running(grandchild), 5)
    assert "did not stop within 0.5 s; killing it" in out.getvalue()


def test_children_do_not_outlive_a_supervisor_killed_with_sigkill(tmp_path):
    # An intermediate process plays a supervisor that is `kill -9`ed: it spawns a child the
    # way Supervisor does, then vanishes without running any cleanup.
    script = (
        "import os, subprocess, sys\n"
        "import django; django.setup()\n"
        "from gpuplane.management.commands.run_gpuplane import _die_with_parent\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,\n"
        "                         start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))\n"
        "print(child.pid, flush=True)\n"
        "os.kill(os.getpid(), 9)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "gpuplane.settings", "GPUPLANE_VAR_DIR": str(tmp_path / "var")}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    orphan = int(result.stdout.split()[0])

    assert wait_until(lambda: not running(orphan), 10), f"pid {orphan} outlived its supervisor"


# --- the real thing -----------------------------------------------------------------------

def test_it_serves_the_site_runs_worker_and_beat_and_ctrl_c_stops_every_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    # Embedded defaults in a private var/: SQLite, filesystem broker. The supervisor does not
    # depend on which database or broker is configured, and CI's shared ones stay untouched.
    env.update(DJANGO_SETTINGS_MODULE="gpuplane.settings", GPUPLANE_VAR_DIR=str(tmp_path / "var"))
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=180,
    )
    assert migrate.returncode == 0, migrate.stderr
    port = free_port()

    supervisor = subprocess.Popen(
        [sys.executable, "manage.py", "run_gpuplane", "--port", str(port), "--stop-timeout", "15"],
        cwd=BASE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines: list[str] = []

    def collect() -> None:
        assert supervisor.stdout is not None
        for line in supervisor.stdout:
            lines.append(line)

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()

    def log() -> str:
        return "".join(lines)

    def login_page_status() -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/admin/login/", timeout=2) as response:
                return response.status
        except OSError:
            return None

    try:
        assert wait_until(lambda: login_page_status() == 200, 60, 0.3), log()
        assert wait_until(lambda: re.search(r"^worker +\| .*celery@\S+ ready\.", log(), re.M) is not None, 60), log()
        assert wait_until(lambda: re.search(r"^beat +\| .*beat: Starting\.\.\.", log(), re.M) is not None, 30), log()
        assert wait_until(lambda: re.search(rf"ready: http://127\.0\.0\.1:{port}/", log()) is not None, 10), log()
        # The login banner comes after the noisy startup of the three, not lost above it.
        banner_at = log().index("ready: http://")
        assert banner_at > log().index("beat: Starting...") and banner_at > log().index(" ready.")

        children = {name: int(pid) for name, pid in STARTED.findall(log())}
        assert set(children) == {"web", "worker", "beat"}
        assert all(running(pid) for pid in children.values())
        # Every process of the installation, grandchildren included (gunicorn workers,
        # Celery's prefork pool): each child leads a process group of its own.
        everything = set().union(*(group_members(pid) for pid in children.values()))
        assert len(group_members(children["worker"])) >= 3, "worker + 2 pool processes"
        assert len(group_members(children["web"])) >= 3, "gunicorn master + 2 workers"

        began = time.monotonic()
        supervisor.send_signal(signal.SIGINT)  # what Ctrl-C in `make run` delivers
        status = supervisor.wait(timeout=30)
        stopped_in_s = time.monotonic() - began
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait()

    assert status == 0, log()
    assert wait_until(lambda: not any(running(pid) for pid in everything), 5), (
        f"left running: {sorted(pid for pid in everything if running(pid))}"
    )
    # Graceful, not killed at the deadline: the stop timeout was 15 s.
    assert stopped_in_s < 15, log()
    assert "did not stop within" not in log()
    reader.join(timeout=5)
    assert "all processes stopped" in log()
