"""`manage.py run_gpuplane`: web + Celery worker + Celery beat as one foreground program.

This is what `make run` execs, after `run_gpuplane --check-port` (which only checks that the web
server's address is free, gpuplane/ports.py) has run before the migrations and the admin login
are printed. The three processes are `process_specs`; gpuplane/supervisor.py runs them: output
prefixed by name, Ctrl-C and SIGTERM forwarded, a crashed process started again a few times
before it gives up, nothing left behind.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from gpuplane.management.commands.ensure_admin import admin_password_path, format_saved_login, valid_saved_login
from gpuplane.ports import accepts_connections, bind_address, port_problem, public_url
from gpuplane.supervisor import ProcessSpec, Supervisor, _die_with_parent

__all__ = ["Command", "ProcessSpec", "Supervisor", "_die_with_parent", "process_specs"]


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
            cwd=str(settings.BASE_DIR),
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
