"""The port check of `make run` (`run_gpuplane --check-port`, gpuplane/ports.py) and what the
ready banner prints: the busy port is reported before the login, the password not at all."""
from __future__ import annotations

import io
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from gpuplane.management.commands import run_gpuplane
from gpuplane.management.commands.ensure_admin import SavedLogin, write_saved_login
from gpuplane.ports import port_problem

BASE_DIR = Path(__file__).resolve().parents[2]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def no_supervisor(monkeypatch):
    """Fail instead of starting web, worker and beat."""
    def refuse(self):
        raise AssertionError("the supervisor was started")
    monkeypatch.setattr(run_gpuplane.Supervisor, "run", refuse)


def test_a_busy_port_is_named_with_the_way_to_choose_another(busy_port, no_supervisor):
    with pytest.raises(CommandError) as error:
        call_command("run_gpuplane", "--check-port", "--port", str(busy_port))

    message = str(error.value)
    assert f"port {busy_port} is already in use on 127.0.0.1" in message
    assert f"make run PORT={busy_port + 1}" in message


def test_a_free_port_passes_the_check_and_nothing_is_started(free_port, no_supervisor):
    out = io.StringIO()

    call_command("run_gpuplane", "--check-port", "--port", str(free_port), stdout=out)

    assert out.getvalue() == ""


def test_the_full_command_refuses_a_busy_port_before_starting_anything(busy_port, no_supervisor):
    with pytest.raises(CommandError, match=f"port {busy_port} is already in use"):
        call_command("run_gpuplane", "--port", str(busy_port))


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("127.0.0.1", 70000, "port 70000 is not a TCP port (1 to 65535)"),
        ("127.0.0.1", 0, "port 0 is not a TCP port"),
        # TEST-NET-1 (RFC 5737): never an address of this machine.
        ("192.0.2.1", 8000, "cannot listen on 192.0.2.1:8000"),
        ("no-such-host.invalid", 8000, "cannot listen on no-such-host.invalid:8000"),
    ],
)
def test_other_addresses_that_cannot_be_used_are_explained(host, port, expected):
    problem = port_problem(host, port)

    assert problem is not None and expected in problem
    assert "make run" in problem


def test_make_run_checks_the_port_before_anything_else_is_printed(tmp_path):
    # `make -n` prints the recipe without running it; the stamp is made current so that the
    # install step is not part of it.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    (venv / ".requirements-installed").touch()
    plan = subprocess.run(
        ["make", "-n", "run", f"VENV={venv}", "PORT=8123"],
        cwd=BASE_DIR, capture_output=True, text=True, timeout=30, check=True,
    ).stdout

    check = plan.index("run_gpuplane --check-port --host 127.0.0.1 --port 8123")
    assert check < plan.index("migrate")
    assert check < plan.index("ensure_admin")


class _Recorder:
    def __init__(self) -> None:
        self.said: list[str] = []

    def say(self, message: str) -> None:
        self.said.append(message)


def test_the_ready_banner_names_the_login_but_not_the_password(db, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from django.contrib.auth.models import User

    User.objects.create_superuser("admin", password="s3cret-from-the-first-run")
    write_saved_login(tmp_path / "admin-password.txt", SavedLogin("admin", "s3cret-from-the-first-run"))
    recorder = _Recorder()

    run_gpuplane.Command()._announce(recorder, "127.0.0.1", 8123)  # type: ignore[arg-type]

    banner = "\n".join(recorder.said)
    assert "ready: http://127.0.0.1:8123/" in banner
    assert "username: admin" in banner
    assert str(tmp_path / "admin-password.txt") in banner
    assert "s3cret-from-the-first-run" not in banner
