"""`manage.py run_gpuplane`: web + Celery worker + Celery beat as one foreground program.

This is what `make run` execs, after `run_gpuplane --check-port` (which only checks that the web
server's address is free, gpuplane/ports.py) has run before the migrations and the admin login
are printed. It is a small process supervisor (think `honcho start` with a
Procfile written in Python, see `process_specs`):

- each process runs in its own session, so a Ctrl-C in the terminal reaches only the
  supervisor, which forwards it once to every child (Celery treats a second SIGINT as
  "cold shutdown", so the terminal must not deliver one as well);
- each line a child prints is echoed with its name in front ("worker | ...");
- SIGINT/SIGTERM are forwarded to every child; children still alive after --stop-timeout
  seconds are SIGKILLed together with their whole process group (gunicorn workers, Celery
  pool processes); a second Ctrl-C skips the wait;
- when any child exits on its own, the others are stopped and the supervisor exits 1;
- children get SIGTERM from the kernel if the supervisor itself dies (PR_SET_PDEATHSIG), so
  not even `kill -9` of the supervisor leaves a worker or beat behind.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gpuplane.management.commands.ensure_admin import admin_password_path, format_saved_login, valid_saved_login
from gpuplane.ports import accepts_connections, bind_address, port_problem, public_url
from gpuplane.redaction import mask_url_credentials

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


@dataclass(frozen=True)
class ProcessSpec:
    """One supervised process: a short name for the log prefix, the argv to exec, and a regex
    matching the output line that says it is up (None: up as soon as it runs)."""

    name: str
    argv: tuple[str, ...]
    ready_pattern: str | None = None


def process_specs(host: str, port: int, *, embedded_broker: bool, beat_schedule: str) -> list[ProcessSpec]:
    """The three processes of a gpuplane installation, in start order.

    `python -m` (not the console scripts) so that the children use this interpreter and
    find the project on sys.path from the working directory.
    """
    python = sys.executable
    worker = [python, "-m", "celery", "-A", "gpuplane", "worker", "-l", "info", "--concurrency", "2"]
    if embedded_broker:
        # Gossip, mingle and heartbeats exist to coordinate several workers. With the filesystem
        # transport their fanout messages are files, and those addressed to the reply queues of
        # a worker that died are never consumed: they would pile up under var/ forever.
        worker += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    return [
        ProcessSpec(
            "web",
            (
                python, "-m", "gunicorn", "gpuplane.wsgi:application",
                "--bind", bind_address(host, port),
                "--workers", "2", "--threads", "4",
                # Hooks: each worker keeps its placement snapshot warm (scheduler.services.snapshot_warmer).
                "--config", "python:gpuplane.gunicorn_hooks",
                # Finish in-flight requests, but well inside the supervisor's stop timeout.
                "--graceful-timeout", "5",
                "--access-logfile", "-",
                # gunicorn 27 opens a control socket in ~/.gunicorn by default; two instances
                # (make run beside the test suite) would fight over it, and nothing uses it.
                "--no-control-socket",
            ),
            ready_pattern=r"Booting worker with pid",
        ),
        ProcessSpec("worker", tuple(worker), ready_pattern=r"celery@\S+ ready\."),
        ProcessSpec(
            "beat",
            (python, "-m", "celery", "-A", "gpuplane", "beat", "-l", "info", "-s", beat_schedule),
            ready_pattern=r"beat: Starting\.\.\.",
        ),
    ]


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A preexec_fn asking the kernel to SIGTERM the child when the supervisor goes away."""
    # Loaded here, in the parent: the child between fork and exec should do as little as possible.
    libc_name = ctypes.util.find_library("c") if sys.platform.startswith("linux") else None
    libc = ctypes.CDLL(libc_name, use_errno=True) if libc_name else None

    def preexec() -> None:
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        # The supervisor may have died between fork and prctl; then nobody would stop us.
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


class _Child:
    def __init__(self, spec: ProcessSpec, popen: subprocess.Popen[bytes]) -> None:
        self.spec = spec
        self.popen = popen
        self.reader: threading.Thread | None = None
        self._ready_re = re.compile(spec.ready_pattern) if spec.ready_pattern else None
        self.ready = self._ready_re is None

    def note(self, line: str) -> None:
        """Look for the ready line in one line of the child's output."""
        if not self.ready and self._ready_re is not None and self._ready_re.search(line):
            self.ready = True

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def kill_group(self) -> None:
        """SIGKILL everything left in the child's process group (its pgid is its pid)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Supervisor:
    """Starts `specs`, echoes their output to `out`, and stops them all together.

    Contract of `run()`: returns 0 when stopped by SIGINT/SIGTERM, 1 when a child exited on
    its own; in both cases no child (nor anything in a child's process group) is left running.
    `on_ready` is called once, when every child has printed its ready line and `ready_check`
    passes (or, should a ready line never come, `ready_check` alone after `ready_grace_s`).
    """

    def __init__(
        self,
        specs: list[ProcessSpec],
        out: IO[str],
        *,
        stop_timeout_s: float,
        ready_check: Callable[[], bool] | None = None,
        on_ready: Callable[[], None] | None = None,
        ready_grace_s: float = 30.0,
    ) -> None:
        self.specs = specs
        self.out = out
        self.stop_timeout_s = stop_timeout_s
        self.ready_check = ready_check
        self.on_ready = on_ready
        self.ready_grace_s = ready_grace_s
        self.children: list[_Child] = []
        self._lock = threading.Lock()
        self._stop_signals: list[int] = []
        self._label_width = max(len(spec.name) for spec in specs)

    # --- output ----------------------------------------------------------------------------
    def say(self, message: str) -> None:
        """Print a supervisor line (prefixed like the children's, so logs stay aligned)."""
        for line in message.splitlines() or [""]:
            self._emit("gpuplane", line)

    def _emit(self, label: str, line: str) -> None:
        line = mask_url_credentials(line)  # a child may print REDIS_URL & co. with their password
        with self._lock:
            try:
                self.out.write(f"{label:<{max(self._label_width, 8)}} | {line}\n")
                self.out.flush()
            except (BrokenPipeError, ValueError):
                # Our reader went away (`make run | head`); keep draining the children's pipes
                # so that they never block on a full one.
                pass

    def _pump(self, child: _Child) -> None:
        assert child.popen.stdout is not None
        for raw in iter(child.popen.stdout.readline, b""):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            child.note(line)
            self._emit(child.name, line)

    # --- lifecycle -------------------------------------------------------------------------
    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask `run()` to stop everything, as if `signum` had arrived; a second call skips the wait."""
        self._stop_signals.append(signum)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop(signum)

    def start(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # lines must reach us as they are printed
        preexec = _die_with_parent(os.getpid())
        for spec in self.specs:
            popen = subprocess.Popen(
                spec.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(settings.BASE_DIR),
                start_new_session=True,
                preexec_fn=preexec,
            )
            self.children.append(_Child(spec, popen))
            self.say(f"started {spec.name} (pid {popen.pid}): {shlex.join(spec.argv)}")
        # Readers start only after every fork: preexec_fn is unsafe once other threads run.
        for child in self.children:
            child.reader = threading.Thread(target=self._pump, args=(child,), name=f"pump-{child.name}", daemon=True)
            child.reader.start()

    def run(self) -> int:
        """Start the children, wait for a stop signal or a dead child, stop everything."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            try:
                self.start()
            except BaseException:
                self.stop(signal.SIGTERM)
                raise
            return self._watch()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _is_ready(self, started_at: float) -> bool:
        # A changed log format must not hide the login banner forever: after the grace period
        # the ready_check alone decides.
        children_ready = all(child.ready for child in self.children) or (
            time.monotonic() - started_at > self.ready_grace_s
        )
        return children_ready and (self.ready_check is None or self.ready_check())

    def _watch(self) -> int:
        started_at = time.monotonic()
        announced = False
        while True:
            if self._stop_signals:
                signum = self._stop_signals[0]
                self.say(f"received {signal.Signals(signum).name}; stopping {', '.join(c.name for c in self.children)}")
                self.stop(signum)
                return 0
            dead = next((child for child in self.children if not child.alive()), None)
            if dead is not None:
                self.say(f"{dead.name} exited with status {dead.popen.returncode}; stopping the others")
                self.stop(signal.SIGTERM)
                return 1
            if not announced and self._is_ready(started_at):
                announced = True
                if self.on_ready:
                    self.on_ready()
            time.sleep(0.2)

    def stop(self, signum: int) -> None:
        """Forward `signum` to each child, wait up to stop_timeout_s, then SIGKILL the groups."""
        already = len(self._stop_signals)
        for child in self.children:
            child.signal(signum)
        deadline = time.monotonic() + self.stop_timeout_s
        while any(child.alive() for child in self.children) and time.monotonic() < deadline:
            if len(self._stop_signals) > already:
                self.say("second signal: killing now")
                break
            time.sleep(0.1)
        for child in self.children:
            if child.alive():
                self.say(f"{child.name} (pid {child.pid}) did not stop within {self.stop_timeout_s:g} s; killing it")
            # Also sweeps grandchildren a crashed child may have left in its group.
            child.kill_group()
        for child in self.children:
            child.popen.wait()
            if child.reader is not None:
                child.reader.join(timeout=2)
        self.say("all processes stopped")


def _prepare_metrics_dir() -> None:
    """Give web and worker processes one prometheus_client multiprocess directory.

    gunicorn runs several workers; without a shared directory /metrics would show only what the
    worker answering the scrape recorded (e.g. its own placement decisions). The directory must be
    empty at start, or counters of a previous run would be added in.
    """
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    metrics_dir = Path(settings.VAR_DIR) / "prometheus-multiproc"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)


class Command(BaseCommand):
    help = "Run gpuplane's web server, Celery worker and Celery beat in the foreground; Ctrl-C stops all three."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address the web server binds (default 127.0.0.1)")
        parser.add_argument("--port", type=int, default=8000, help="web server port (default 8000)")
        parser.add_argument(
            "--stop-timeout",
            type=float,
            default=10.0,
            help="seconds to wait for a graceful stop before killing (default 10)",
        )
        parser.add_argument(
            "--check-port",
            action="store_true",
            help="only check that the web server could listen on --host/--port (exit status 1 with the reason if not)",
        )

    def handle(self, *args: Any, host: str, port: int, stop_timeout: float, check_port: bool, **options: Any) -> None:
        problem = port_problem(host, port)
        if problem is not None:
            raise CommandError(problem)
        if check_port:
            return
        _prepare_metrics_dir()
        specs = process_specs(
            host,
            port,
            embedded_broker=settings.CELERY_BROKER_URL.startswith("filesystem:"),
            beat_schedule=settings.CELERY_BEAT_SCHEDULE_FILENAME,
        )
        supervisor = Supervisor(
            specs,
            sys.stdout,
            stop_timeout_s=stop_timeout,
            ready_check=lambda: accepts_connections(host, port),
            on_ready=lambda: self._announce(supervisor, host, port),
        )
        status = supervisor.run()
        if status:
            raise SystemExit(status)

    def _announce(self, supervisor: Supervisor, host: str, port: int) -> None:
        login_url = public_url(host, port, "/accounts/login/")
        lines = [f"ready: {public_url(host, port)}  (Ctrl-C stops web, worker and beat)"]
        login = valid_saved_login(admin_password_path())
        if login is not None:
            # The password itself is printed only once, when ensure_admin creates the account.
            lines += format_saved_login(login_url, login, admin_password_path()).splitlines()
        else:
            lines.append(f"Log in at {login_url}")
        supervisor.say("\n".join(lines))
