"""Safe by default (issue 8): DEBUG off, a generated secret key, owner-only var/, a clean check --deploy.

Each case starts a fresh interpreter, as in test_settings_env: settings are read once per
process, and the umask a process runs with is a per-process property.
"""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.gpuplane.test_settings_env import BASE_DIR, SETTINGS_VARIABLES

# What a production deployment sets (docs/operations.md, "Production").
PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": "x7Qm2pV9sLk4Rt8Wz1Nc6Yb3Hd5Jf0Ga-Ue2Io9Pl7Kj4Mn6Bv8Cx1Zq3Wr5Ty",
    "ALLOWED_HOSTS": "gpuplane.example.com",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "SESSION_COOKIE_SECURE": "true",
    "CSRF_COOKIE_SECURE": "true",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https",
    "CSRF_TRUSTED_ORIGINS": "https://gpuplane.example.com",
}


def run_python(tmp_path: Path, code: str, *argv: str, umask: int = 0o022, **variables: str) -> subprocess.CompletedProcess[str]:
    """`python -c code` (or `python argv...` when code is empty) with exactly these settings variables.

    The child starts with a permissive umask, as from a login shell, so that only what the
    project does makes its files private.
    """
    # The browser tests set DJANGO_ALLOW_ASYNC_UNSAFE in this process; a deployment never has it.
    unwanted = (*SETTINGS_VARIABLES, "DJANGO_ALLOW_ASYNC_UNSAFE")
    env = {name: value for name, value in os.environ.items() if name not in unwanted}
    env["DJANGO_SETTINGS_MODULE"] = "gpuplane.settings"
    env.setdefault("GPUPLANE_VAR_DIR", str(tmp_path / "var"))
    env.update(variables)
    args = [sys.executable, "-c", code] if code else [sys.executable, *argv]
    return subprocess.run(
        args, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
        preexec_fn=lambda: os.umask(umask),
    )


SETUP = "import django; django.setup()\nfrom django.conf import settings\n"


def test_debug_is_off_unless_asked_for(tmp_path):
    default = run_python(tmp_path, SETUP + "print(settings.DEBUG)")
    opted_in = run_python(tmp_path, SETUP + "print(settings.DEBUG)", DEBUG="true")

    assert default.returncode == 0, default.stderr
    assert default.stdout.strip() == "False"
    assert opted_in.stdout.strip() == "True"


def test_a_secret_key_is_generated_once_kept_0600_and_reused(tmp_path):
    key_file = tmp_path / "var" / "secret-key"

    first = run_python(tmp_path, SETUP + "print(settings.SECRET_KEY)")
    second = run_python(tmp_path, SETUP + "print(settings.SECRET_KEY)", DEBUG="true")

    assert first.returncode == 0, first.stderr
    key = first.stdout.strip()
    assert len(key) >= 50 and not key.startswith("django-insecure")
    assert second.stdout.strip() == key  # web, worker, beat and the next start agree
    assert key_file.read_text().strip() == key
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600


def test_secret_key_from_the_environment_wins_and_no_file_is_written(tmp_path):
    result = run_python(tmp_path, SETUP + "print(settings.SECRET_KEY)", SECRET_KEY=PRODUCTION["SECRET_KEY"])

    assert result.stdout.strip() == PRODUCTION["SECRET_KEY"]
    assert not (tmp_path / "var" / "secret-key").exists()


def test_a_short_key_file_stops_the_start(tmp_path):
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "secret-key").write_text("short\n")

    result = run_python(tmp_path, SETUP)

    assert result.returncode != 0
    assert "holds no usable secret key" in result.stderr


# Everything under var/ that web, worker and beat create, made the way they make it.
CREATE_VAR_FILES = SETUP + """
import shelve
from django.core.cache import cache
from django.db import connection
from gpuplane.celery import app
from gpuplane.management.commands.ensure_admin import SavedLogin, admin_password_path, write_saved_login
from nodes.cluster.sim.store import StateFile

with connection.cursor() as cursor:  # the SQLite database
    cursor.execute("CREATE TABLE probe (x INTEGER)")
cache.set("probe", 1)
with shelve.open(settings.CELERY_BEAT_SCHEDULE_FILENAME) as schedule:  # as Celery beat keeps it
    schedule["probe"] = 1
write_saved_login(admin_password_path(), SavedLogin("admin", "pw"))
with StateFile(settings.GPUPLANE_SIMULATED_STATE).transaction(lambda state: None) as state:
    state["probe"] = 1
with app.connection_for_write() as conn:  # a message in this test's own embedded broker
    conn.SimpleQueue("probe").put({"x": 1})
"""


def _modes(root: Path) -> dict[str, int]:
    return {str(path.relative_to(root)): stat.S_IMODE(path.lstat().st_mode) for path in [root, *root.rglob("*")]}


def test_every_file_under_var_is_0600_and_every_directory_0700(tmp_path):
    var = tmp_path / "var"

    result = run_python(tmp_path, CREATE_VAR_FILES)

    assert result.returncode == 0, result.stderr
    modes = _modes(var)
    names = set(modes)
    assert {"gpuplane.sqlite3", "secret-key", "admin-password.txt", "simulated-cluster.json", "celery-broker/queue"} <= names
    assert any(name.startswith("celerybeat-schedule") for name in names)
    assert any(name.startswith("celery-broker/queue/") for name in names)  # the message
    assert any(name.startswith("cache/") for name in names)
    loose = {
        name: oct(mode) for name, mode in modes.items()
        if mode != (0o700 if (var / name if name != "." else var).is_dir() else 0o600)
    }
    assert loose == {}


def test_an_existing_var_dir_is_tightened_on_start(tmp_path):
    var = tmp_path / "var"
    (var / "celery-broker" / "queue").mkdir(parents=True)
    for path in (var, var / "celery-broker", var / "celery-broker" / "queue"):
        path.chmod(0o755)
    (var / "gpuplane.sqlite3").write_bytes(b"")
    (var / "gpuplane.sqlite3").chmod(0o644)

    result = run_python(tmp_path, SETUP)

    assert result.returncode == 0, result.stderr
    assert _modes(var)["."] == 0o700
    assert _modes(var)["gpuplane.sqlite3"] == 0o600
    assert _modes(var)["celery-broker/queue"] == 0o700


def _check_deploy(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    return run_python(tmp_path, "", "manage.py", "check", "--deploy", "--fail-level", "WARNING", **variables)


def test_check_deploy_is_clean_with_the_documented_production_settings(tmp_path):
    result = _check_deploy(tmp_path, **PRODUCTION)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_names_what_is_missing_without_them(tmp_path):
    # The clean run above means something only if the same check does complain without the settings.
    result = _check_deploy(tmp_path, SECRET_KEY=PRODUCTION["SECRET_KEY"])

    assert result.returncode != 0
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in result.stderr + result.stdout


def test_the_operations_guide_documents_every_production_variable():
    readme = (BASE_DIR / "docs" / "operations.md").read_text()
    missing = [name for name in PRODUCTION if f"`{name}`" not in readme]
    assert missing == []


def test_static_files_are_served_with_debug_off(client, settings):
    # whitenoise serves the app's assets and the vendored plotly.js without DEBUG or collectstatic.
    assert settings.DEBUG is False
    for path in ("/static/css/gpuplane.css", "/static/vendor/plotly/plotly.min.js"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert b"".join(response.streaming_content)  # type: ignore[attr-defined]
