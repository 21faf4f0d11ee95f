"""`manage.py check --deploy` is clean with exactly the settings the production overlay gives the
web pods: its ConfigMap, the container's own env, and the Secret's variables (values the
operator supplies; here stand-ins of the right shape)."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys

from tests.deploy.rendering import BASE_DIR, named, pod_spec, render

SECRET_STAND_INS = {
    "SECRET_KEY": secrets.token_urlsafe(50),
    "DATABASE_URL": "postgres://gpuplane:pw@postgres.example:5432/gpuplane",
    "REDIS_URL": "redis://redis.example:6379/0",
    "GPUPLANE_METRICS_TOKEN": secrets.token_urlsafe(20),
}


def web_environment(overlay: str) -> dict[str, str]:
    objects = render(overlay)
    web = named(objects, "Deployment", "gpuplane-web")
    container = pod_spec(web)["containers"][0]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env |= named(objects, "ConfigMap", source["configMapRef"]["name"])["data"]
        elif "secretRef" in source:
            assert source["secretRef"]["name"] == "gpuplane-secrets"
            env |= SECRET_STAND_INS
    for variable in container.get("env", []):
        env[variable["name"]] = variable.get("value", "10.0.0.7")  # fieldRefs: the pod's IP
    return env


def check_deploy(tmp_path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    child = {name: value for name, value in os.environ.items()
             if name in ("PATH", "HOME", "LANG", "PYTHONPATH", "SYSTEMROOT")}
    child |= env | {"GPUPLANE_VAR_DIR": str(tmp_path / "var"), "GPUPLANE_STATIC_ROOT": str(tmp_path / "static")}
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                          cwd=BASE_DIR, env=child, capture_output=True, text=True, timeout=120)


def test_check_deploy_is_clean_with_the_production_overlays_settings(tmp_path):
    env = web_environment("production")
    assert env["GPUPLANE_ENV"] == "production"

    result = check_deploy(tmp_path, env)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_without_the_overlays_hsts_choices_it_is_not(tmp_path):
    # The clean run means something only if the same check complains when a setting is missing.
    env = web_environment("production")
    del env["SECURE_HSTS_PRELOAD"]

    result = check_deploy(tmp_path, env)

    assert result.returncode != 0
    assert "security.W021" in result.stdout + result.stderr
