"""Settings come from the environment; a bad value must stop the process at start, loudly.

The end-to-end cases start a fresh interpreter (`import django; django.setup()`) because
settings are read once per process: that is the only honest way to see what a deployment
with those variables would get.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from gpuplane.env import env_bool, env_choice, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parents[2]

# Everything settings.py reads; removed from the child's environment so that only what a test
# passes counts (CI exports DATABASE_URL and REDIS_URL, a developer may export more).
SETTINGS_VARIABLES = (
    "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS", "DATABASE_URL", "DATABASE_CONN_MAX_AGE", "REDIS_URL",
    "CELERY_TASK_ALWAYS_EAGER", "GPUPLANE_CLUSTER", "GPUPLANE_KUBECONFIG", "GPUPLANE_SIMULATED_STATE",
    "GPUPLANE_INVENTORY_SYNC_INTERVAL_S", "GPUPLANE_VAR_DIR", "LOG_LEVEL", "GPUPLANE_PROMETHEUS_URL",
    "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SECURE_HSTS_PRELOAD",
    "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_PROXY_SSL_HEADER", "CSRF_TRUSTED_ORIGINS",
    "GPUPLANE_LOGIN_RATE", "GPUPLANE_TOKEN_RATE", "GPUPLANE_API_TOKEN_TTL_H", "GPUPLANE_CLIENT_IP_HEADER",
    "GPUPLANE_CELERY_VISIBILITY_TIMEOUT_S",
)

DUMP_SETTINGS = """
import json
from django.conf import settings as s
db = s.DATABASES["default"]
print(json.dumps({
    "DEBUG": s.DEBUG,
    "SECRET_KEY": s.SECRET_KEY,
    "ALLOWED_HOSTS": s.ALLOWED_HOSTS,
    "db_engine": db["ENGINE"], "db_name": str(db["NAME"]), "db_host": db.get("HOST"), "db_port": db.get("PORT"),
    "broker_url": s.CELERY_BROKER_URL,
    "broker_options": s.CELERY_BROKER_TRANSPORT_OPTIONS,
    "beat_schedule_file": s.CELERY_BEAT_SCHEDULE_FILENAME,
    "cluster": s.GPUPLANE_CLUSTER,
    "simulated_state": s.GPUPLANE_SIMULATED_STATE,
    "kubeconfig": s.GPUPLANE_KUBECONFIG,
}))
"""


def django_setup(tmp_path: Path, code: str = "", **variables: str) -> subprocess.CompletedProcess[str]:
    """Run `django.setup()` (then `code`) in a new interpreter with exactly these variables."""
    env = {name: value for name, value in os.environ.items() if name not in SETTINGS_VARIABLES}
    env["DJANGO_SETTINGS_MODULE"] = "gpuplane.settings"
    env.setdefault("GPUPLANE_VAR_DIR", str(tmp_path / "var"))
    env.update(variables)
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()\n" + code],
        cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"DEBUG": "maybe"}, "DEBUG='maybe' is not a boolean"),
        ({"DATABASE_CONN_MAX_AGE": "forever"}, "DATABASE_CONN_MAX_AGE='forever' is not an integer"),
        ({"GPUPLANE_INVENTORY_SYNC_INTERVAL_S": "1"}, "GPUPLANE_INVENTORY_SYNC_INTERVAL_S=1 must be >= 5"),
        ({"GPUPLANE_CLUSTER": "foo"}, "GPUPLANE_CLUSTER='foo' must be one of: simulated, kubernetes"),
        ({"SECURE_PROXY_SSL_HEADER": "https"}, "SECURE_PROXY_SSL_HEADER='https' is not `Header-Name: value`"),
        ({"SECURE_HSTS_SECONDS": "-1"}, "SECURE_HSTS_SECONDS=-1 must be >= 0"),
        # Shorter than the longest task would let Redis hand a running task to a second worker.
        ({"GPUPLANE_CELERY_VISIBILITY_TIMEOUT_S": "300"}, "GPUPLANE_CELERY_VISIBILITY_TIMEOUT_S=300 must be >= 420"),
    ],
    ids=["bool", "int", "int-minimum", "choice", "header-pair", "hsts-seconds", "visibility-timeout"],
)
def test_it_refuses_to_start_on_a_bad_value(tmp_path, variables, message):
    result = django_setup(tmp_path, **variables)

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_it_needs_no_external_service_by_default(tmp_path):
    var = tmp_path / "var"
    result = django_setup(tmp_path, DUMP_SETTINGS)

    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["DEBUG"] is False  # a developer opts in (tests/gpuplane/test_safe_defaults.py)
    assert seen["db_engine"] == "django.db.backends.sqlite3"
    assert seen["db_name"] == str(var / "gpuplane.sqlite3")
    assert seen["broker_url"] == "filesystem://localhost//"
    # Every folder of the embedded broker is under var/ and exists, so a worker and a web
    # process started from any directory meet in the same place.
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        folder = Path(seen["broker_options"][key])
        assert folder.is_relative_to(var / "celery-broker"), key
        assert folder.is_dir(), key
    assert seen["beat_schedule_file"] == str(var / "celerybeat-schedule")
    assert seen["cluster"] == "simulated"
    assert seen["simulated_state"] == str(var / "simulated-cluster.json")


def test_it_switches_to_production_services_from_the_environment(tmp_path):
    result = django_setup(
        tmp_path,
        DUMP_SETTINGS,
        DEBUG="false",
        SECRET_KEY="s3cret-from-the-vault",
        ALLOWED_HOSTS=" gpuplane.example.com, ,10.0.0.7 ",
        DATABASE_URL="postgres://gp:pw@db.internal:5433/gpuplane",
        REDIS_URL="redis://cache.internal:6379/2",
        GPUPLANE_CLUSTER="kubernetes",
        GPUPLANE_KUBECONFIG="/etc/gpuplane/kubeconfig",
        GPUPLANE_CELERY_VISIBILITY_TIMEOUT_S="7200",
    )

    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["DEBUG"] is False
    assert seen["SECRET_KEY"] == "s3cret-from-the-vault"
    assert seen["ALLOWED_HOSTS"] == ["gpuplane.example.com", "10.0.0.7"]
    assert seen["db_engine"] == "django.db.backends.postgresql"
    assert (seen["db_name"], seen["db_host"], seen["db_port"]) == ("gpuplane", "db.internal", 5433)
    assert seen["broker_url"] == "redis://cache.internal:6379/2"
    # Longer than the hard task time limit (360 s), or Redis would hand a running task to a second worker.
    assert seen["broker_options"] == {"visibility_timeout": 7200}
    assert seen["cluster"] == "kubernetes"
    assert seen["kubeconfig"] == "/etc/gpuplane/kubeconfig"


# --- the helpers themselves ---------------------------------------------------------------

@pytest.mark.parametrize("raw", ["1", "true", "TRUE", " yes ", "On"])
def test_env_bool_reads_true_spellings(monkeypatch, raw):
    monkeypatch.setenv("GP_FLAG", raw)
    assert env_bool("GP_FLAG", False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", ""])
def test_env_bool_reads_false_spellings(monkeypatch, raw):
    monkeypatch.setenv("GP_FLAG", raw)
    assert env_bool("GP_FLAG", True) is False


def test_env_bool_uses_the_default_only_when_unset(monkeypatch):
    monkeypatch.delenv("GP_FLAG", raising=False)
    assert env_bool("GP_FLAG", True) is True
    assert env_bool("GP_FLAG", False) is False


@pytest.mark.parametrize("raw", ["maybe", "2", "yes please"])
def test_env_bool_rejects_anything_else(monkeypatch, raw):
    monkeypatch.setenv("GP_FLAG", raw)
    with pytest.raises(ImproperlyConfigured, match="GP_FLAG"):
        env_bool("GP_FLAG", True)


def test_env_int_parses_and_enforces_the_minimum(monkeypatch):
    monkeypatch.setenv("GP_SECONDS", "42")
    assert env_int("GP_SECONDS", 7, minimum=5) == 42
    monkeypatch.setenv("GP_SECONDS", "5")
    assert env_int("GP_SECONDS", 7, minimum=5) == 5  # the minimum itself is allowed
    monkeypatch.setenv("GP_SECONDS", "4")
    with pytest.raises(ImproperlyConfigured, match="GP_SECONDS=4 must be >= 5"):
        env_int("GP_SECONDS", 7, minimum=5)


@pytest.mark.parametrize("raw", ["", "1.5", "ten", "0x10"])
def test_env_int_rejects_non_integers(monkeypatch, raw):
    monkeypatch.setenv("GP_SECONDS", raw)
    with pytest.raises(ImproperlyConfigured, match="is not an integer"):
        env_int("GP_SECONDS", 7)


def test_env_int_default_is_not_checked_against_the_environment(monkeypatch):
    monkeypatch.delenv("GP_SECONDS", raising=False)
    assert env_int("GP_SECONDS", 30, minimum=5) == 30


def test_env_list_splits_on_commas_and_drops_blanks(monkeypatch):
    monkeypatch.setenv("GP_HOSTS", " a.example ,, b.example,")
    assert env_list("GP_HOSTS", ["default"]) == ["a.example", "b.example"]
    monkeypatch.delenv("GP_HOSTS")
    assert env_list("GP_HOSTS", ["default"]) == ["default"]


def test_env_choice_accepts_only_listed_values(monkeypatch):
    monkeypatch.setenv("GP_MODE", "kubernetes")
    assert env_choice("GP_MODE", "simulated", ("simulated", "kubernetes")) == "kubernetes"
    monkeypatch.setenv("GP_MODE", "Kubernetes")  # case matters: a typo must not pass
    with pytest.raises(ImproperlyConfigured, match="must be one of: simulated, kubernetes"):
        env_choice("GP_MODE", "simulated", ("simulated", "kubernetes"))


def test_env_str_returns_the_raw_value_or_the_default(monkeypatch):
    monkeypatch.setenv("GP_NAME", " spaced ")
    assert env_str("GP_NAME", "x") == " spaced "
    monkeypatch.delenv("GP_NAME")
    assert env_str("GP_NAME", "x") == "x"
