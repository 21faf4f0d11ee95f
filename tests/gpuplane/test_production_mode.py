"""GPUPLANE_ENV=production: secure defaults, and a start refused, loudly, on what has no safe default.

Settings are read once per process, so the start itself runs in a fresh interpreter; the list
of problems is a pure function, checked here case by case.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuplane.production import production_problems

BASE_DIR = Path(__file__).resolve().parents[2]
KEY = "k3y-" + "x" * 20 + "".join(chr(ord("a") + i) for i in range(26)) + "-0123456789"

# What deploy/ sets (the ConfigMap and the Secret): enough for production to start.
GOOD_ENV = {
    "GPUPLANE_ENV": "production",
    "SECRET_KEY": KEY,
    "ALLOWED_HOSTS": "gpuplane.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://gpuplane.example.com",
    "DATABASE_URL": "postgres://gpuplane:pw@db:5432/gpuplane",
    "REDIS_URL": "redis://redis:6379/0",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto: https",
}

DUMP = """
import json, logging
from django.conf import settings as s
logging.getLogger("gpuplane.test").warning("hello %s", "world", extra={"node": "gpu-1"})
print(json.dumps({name: getattr(s, name) for name in (
    "DEBUG", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS",
    "WHITENOISE_USE_FINDERS", "CELERY_WORKER_HIJACK_ROOT_LOGGER")}
    | {"conn_max_age": s.DATABASES["default"]["CONN_MAX_AGE"]}))
"""


def start(tmp_path: Path, env: dict[str, str], code: str = "") -> subprocess.CompletedProcess[str]:
    """`django.setup()` (then `code`) in a new interpreter with exactly `env` of the settings' variables."""
    child = {name: value for name, value in os.environ.items()
             if not name.startswith(("GPUPLANE_", "SECURE_", "CSRF_", "SESSION_"))
             and name not in ("SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    child |= {"DJANGO_SETTINGS_MODULE": "gpuplane.settings", "GPUPLANE_VAR_DIR": str(tmp_path / "var"), **env}
    return subprocess.run([sys.executable, "-c", "import django; django.setup()\n" + code], cwd=BASE_DIR,
                          env=child, capture_output=True, text=True, timeout=120)


def test_it_refuses_to_start_naming_every_variable_to_set(tmp_path):
    result = start(tmp_path, {"GPUPLANE_ENV": "production"})

    assert result.returncode != 0
    assert "GPUPLANE_ENV=production refuses to start" in result.stderr
    for variable in ("SECRET_KEY", "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "DATABASE_URL", "REDIS_URL",
                     "SECURE_PROXY_SSL_HEADER"):
        assert f"- {variable} is not" in result.stderr, variable


def test_with_the_deployed_settings_it_starts_secure_and_logs_json_to_stdout(tmp_path):
    result = start(tmp_path, GOOD_ENV, DUMP)

    assert result.returncode == 0, result.stderr
    log_line, settings_line = result.stdout.strip().splitlines()[-2:]
    assert json.loads(settings_line) == {
        "DEBUG": False, "SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True, "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31_536_000, "WHITENOISE_USE_FINDERS": False, "CELERY_WORKER_HIJACK_ROOT_LOGGER": False,
        "conn_max_age": 60,
    }
    entry = json.loads(log_line)
    assert entry["level"] == "WARNING" and entry["logger"] == "gpuplane.test"
    assert entry["message"] == "hello world" and entry["node"] == "gpu-1"
    assert entry["time"].endswith("+00:00")


def test_development_is_unchanged_plain_logs_and_no_checks(tmp_path):
    result = start(tmp_path, {}, DUMP)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["SESSION_COOKIE_SECURE"] is False
    assert "WARNING gpuplane.test: hello world" in result.stderr


# --- each unsafe value, one at a time (the pure check) ----------------------------------------

def _settings(**overrides: Any) -> dict[str, Any]:
    settings = {
        "DEBUG": False, "ALLOWED_HOSTS": ["gpuplane.example.com"], "CSRF_TRUSTED_ORIGINS": ["https://gpuplane.example.com"],
        "DATABASES": {"default": {"ENGINE": "django.db.backends.postgresql", "CONN_MAX_AGE": 60}},
        "REDIS_URL": "redis://redis:6379/0", "SESSION_COOKIE_SECURE": True, "CSRF_COOKIE_SECURE": True,
        "SECURE_SSL_REDIRECT": True, "SECURE_HSTS_SECONDS": 31_536_000,
        "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
    }
    return settings | overrides


ENVIRON = {"SECRET_KEY": KEY, "ALLOWED_HOSTS": "gpuplane.example.com"}


def test_the_deployed_settings_have_no_problem():
    assert production_problems(_settings(), ENVIRON) == []


@pytest.mark.parametrize(("overrides", "environ", "named"), [
    ({"DEBUG": True}, {}, "DEBUG"),
    ({}, {"SECRET_KEY": "short"}, "SECRET_KEY is weak"),
    ({}, {"SECRET_KEY": "django-insecure-" + KEY}, "SECRET_KEY is weak"),
    ({"ALLOWED_HOSTS": ["*"]}, {}, "ALLOWED_HOSTS contains '*'"),
    ({"CSRF_TRUSTED_ORIGINS": ["http://gpuplane.example.com"]}, {}, "CSRF_TRUSTED_ORIGINS must be https://"),
    ({"DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "CONN_MAX_AGE": 0}}}, {}, "DATABASE_URL"),
    ({"DATABASES": {"default": {"ENGINE": "django.db.backends.postgresql", "CONN_MAX_AGE": 0}}}, {},
     "DATABASE_CONN_MAX_AGE"),
    ({"SESSION_COOKIE_SECURE": False}, {}, "SESSION_COOKIE_SECURE"),
    ({"CSRF_COOKIE_SECURE": False}, {}, "CSRF_COOKIE_SECURE"),
    ({"SECURE_SSL_REDIRECT": False}, {}, "SECURE_SSL_REDIRECT"),
    ({"SECURE_HSTS_SECONDS": 0}, {}, "SECURE_HSTS_SECONDS"),
])
def test_each_unsafe_value_is_a_problem_naming_its_variable(overrides, environ, named):
    problems = production_problems(_settings(**overrides), ENVIRON | environ)

    assert len(problems) == 1, problems
    assert problems[0].startswith(named)
