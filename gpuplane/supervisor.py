"""A small process supervisor: what `manage.py run_gpuplane` (and so `make run`) runs web, worker and
beat under (think `honcho start` with a Procfile written in Python).

- each process runs in its own session, so a Ctrl-C in the terminal reaches only the
  supervisor, which forwards it once to every child (Celery treats a second SIGINT as
  "cold shutdown", so the terminal must not deliver one as well);
- each line a child prints is echoed with its name in front ("worker | ...");
- SIGINT/SIGTERM are forwarded to every child; children still alive after --stop-timeout
  seconds are SIGKILLed together with their whole process group (gunicorn workers, Celery
  pool processes); a second Ctrl-C skips the wait;
- a child that exits on its own is started again, after a pause that doubles each time (1 s,
  2 s, 4 s ...), up to `max_restarts` times within `restart_window_s`; one more crash in that
  window and the supervisor gives up: it stops the others and exits 1 (a process that cannot
  stay up is a fault to show, not to hide);
- children get SIGTERM from the kernel if the supervisor itself dies (PR_SET_PDEATHSIG), so
  not even `kill -9` of the supervisor leaves a worker or beat behind. A child started again
  runs through a tiny exec shim that sets this itself (`_DIE_WITH_PARENT_SHIM`): a
  preexec_fn is unsafe once the output reader threads run.
- every child gets GPUPLANE_SERVER_ID (`server_id()`): Celery messages they send carry it
  (gpuplane/celery.py), so the test suite's broker check can tell a running server's messages
  from its own leaks (tests/leaks.py).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import IO

from gpuplane.celery import SERVER_ID_ENV
from gpuplane.redaction import mask_url_credentials

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


# Runs in the child before exec: ask for SIGTERM when the supervisor goes, then become the process.
_DIE_WITH_PARENT_SHIM = (
    "import ctypes, ctypes.util, os, signal, sys\n"
    "name = ctypes.util.find_library('c') if sys.platform.startswith('linux') else None\n"
    "if name: ctypes.CDLL(name, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]): os._exit(1)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def server_id(pid: int | None = None) -> str:
    """What a running supervisor's children mark their messages with: `<supervisor pid>`."""
    return str(pid if pid is not None else os.getpid())


def server_alive(marker: str) -> bool:
    """Whether the supervisor that `marker` (a server_id) names is still running."""
    if not marker.isdigit():
        return False
    try:
        os.kill(int(marker), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class ProcessSpec:
    """One supervised process: a short name for the log prefix, the argv to exec, and a regex
    matching the output line that says it is up (None: up as soon as it runs)."""

    name: str
    argv: tuple[str, ...]
    ready_pattern: str | None = None


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

    Contract of `run()`: returns 0 when stopped by SIGINT/SIGTERM, 1 when a child exited on its
    own more than `max_restarts` times within `restart_window_s` (each earlier exit: started again
    after `restart_delay_s`, doubled per crash in the window); in both cases no child (nor
    anything in a child's process group) is left running.
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
        max_restarts: int = 3,
        restart_window_s: float = 600.0,
        restart_delay_s: float = 1.0,
        cwd: str | None = None,
    ) -> None:
        self.specs = specs
        self.out = out
        self.stop_timeout_s = stop_timeout_s
        self.ready_check = ready_check
        self.on_ready = on_ready
        self.ready_grace_s = ready_grace_s
        self.max_restarts = max_restarts
        self.restart_window_s = restart_window_s
        self.restart_delay_s = restart_delay_s
        self.cwd = cwd or os.getcwd()
        self._crashes: dict[str, list[float]] = {}  # name -> monotonic times its process exited on its own
        self._restart_at: dict[str, float] = {}  # name -> when to start it again
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

    def _popen(self, spec: ProcessSpec, *, shim: bool) -> subprocess.Popen[bytes]:
        # Lines must reach us as they are printed; messages carry the server's id (tests/leaks.py).
        env = {**os.environ, "PYTHONUNBUFFERED": "1", SERVER_ID_ENV: server_id()}
        argv = list(spec.argv)
        preexec: Callable[[], None] | None = None
        if shim:  # reader threads run: no Python code between fork and exec
            argv = [sys.executable, "-c", _DIE_WITH_PARENT_SHIM, str(os.getpid()), *argv]
        else:
            preexec = _die_with_parent(os.getpid())
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            cwd=self.cwd, start_new_session=True, preexec_fn=preexec,
        )

    def _read(self, child: _Child) -> None:
        child.reader = threading.Thread(target=self._pump, args=(child,), name=f"pump-{child.name}", daemon=True)
        child.reader.start()

    def start(self) -> None:
        for spec in self.specs:
            popen = self._popen(spec, shim=False)
            self.children.append(_Child(spec, popen))
            self.say(f"started {spec.name} (pid {popen.pid}): {shlex.join(spec.argv)}")
        # Readers start only after every fork: preexec_fn is unsafe once other threads run.
        for child in self.children:
            self._read(child)

    def _crashed(self, child: _Child) -> bool:
        """Note that `child` exited on its own; schedule its restart, or False when it may not restart."""
        now = time.monotonic()
        recent = [t for t in self._crashes.get(child.name, []) if now - t < self.restart_window_s] + [now]
        self._crashes[child.name] = recent
        status = child.popen.returncode
        if len(recent) > self.max_restarts:
            self.say(f"{child.name} exited with status {status} ({len(recent)} exits in "
                     f"{self.restart_window_s:g} s); giving up: stopping the others")
            return False
        delay = self.restart_delay_s * 2 ** (len(recent) - 1)
        self._restart_at[child.name] = now + delay
        self.say(f"{child.name} exited with status {status}; starting it again in {delay:g} s "
                 f"(restart {len(recent)} of at most {self.max_restarts} in {self.restart_window_s:g} s)")
        return True

    def _restart_due(self) -> None:
        now = time.monotonic()
        for child in self.children:
            due = self._restart_at.get(child.name)
            if due is None or now < due:
                continue
            del self._restart_at[child.name]
            if child.reader is not None:
                child.reader.join(timeout=2)  # the old pipe's last lines
            child.kill_group()  # whatever the dead process left in its group
            child.popen = self._popen(child.spec, shim=True)
            child.ready = child.spec.ready_pattern is None
            self.say(f"started {child.name} again (pid {child.pid})")
            self._read(child)

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
            for dead in [c for c in self.children if not c.alive() and c.name not in self._restart_at]:
                if not self._crashed(dead):
                    self.stop(signal.SIGTERM)
                    return 1
            self._restart_due()
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


