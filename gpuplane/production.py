"""Production mode: `GPUPLANE_ENV=production` refuses to start with a setting that is unsafe there.

`make run` needs nothing set: SQLite, a generated secret key, plain http on loopback. In a cluster
the same defaults would be wrong in ways nothing reports: a per-pod secret key logs everyone out
on every restart, SQLite and the embedded broker are not shared between pods, cookies travel
over http. So deploy/ sets GPUPLANE_ENV=production, which makes the secure choices the defaults
(gpuplane/settings.py) and checks here, at start, everything that has no safe default. Every
problem is reported at once, each naming the variable that fixes it.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured

DEVELOPMENT = "development"
PRODUCTION = "production"
MODES = (DEVELOPMENT, PRODUCTION)

# Django's own bar for a secret key (django.core.checks.security.base, W009).
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_UNIQUE_CHARACTERS = 5
HSTS_SECONDS = 31_536_000  # one year, the production default

# Paths reached inside the cluster, not through the TLS-terminating ingress, which must never be
# redirected to https: the kubelet's probes (/healthz is answered before any redirect anyway),
# Prometheus' scrapes, the node agents posting to the web Service (their telemetry and their
# node's GPU report), and the API server calling the admission webhook (TLS of its own, no
# X-Forwarded-Proto).
REDIRECT_EXEMPT = [
    r"^healthz$", r"^metrics(/|$)", r"^api/v1/telemetry/", r"^api/v1/nodes/[^/]+/gpu-report/$", r"^webhooks/",
]


def production_problems(settings: Mapping[str, Any], environ: Mapping[str, str]) -> list[str]:
    """What makes `settings` (the settings module's names) unfit to serve in production, each
    naming the variable to set; [] when nothing does. `environ` says which values were set
    explicitly rather than defaulted."""
    problems: list[str] = []
    if settings["DEBUG"]:
        problems.append("DEBUG is on: set DEBUG=false (error pages would show settings and source)")
    key = environ.get("SECRET_KEY", "")
    if not key:
        problems.append("SECRET_KEY is not set: every pod would generate its own (set it from a Secret)")
    elif (len(key) < SECRET_KEY_MIN_LENGTH or len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS
          or key.startswith("django-insecure-")):
        problems.append(f"SECRET_KEY is weak: use at least {SECRET_KEY_MIN_LENGTH} random characters "
                        "(python -c 'import secrets; print(secrets.token_urlsafe(50))')")
    if "ALLOWED_HOSTS" not in environ:
        problems.append("ALLOWED_HOSTS is not set: name the host names users reach gpuplane at")
    elif "*" in settings["ALLOWED_HOSTS"]:
        problems.append("ALLOWED_HOSTS contains '*': name the host names (Host header attacks)")
    origins = settings["CSRF_TRUSTED_ORIGINS"]
    if not origins:
        problems.append("CSRF_TRUSTED_ORIGINS is not set: give the https:// origin(s) of the site, "
                        "e.g. https://gpuplane.example.com (sign-in and forms fail behind TLS otherwise)")
    elif any(not origin.startswith("https://") for origin in origins):
        problems.append(f"CSRF_TRUSTED_ORIGINS must be https:// origins, not {', '.join(origins)}")
    problems += _shared_services_problems(settings)
    problems += _tls_problems(settings)
    return problems


def _shared_services_problems(settings: Mapping[str, Any]) -> list[str]:
    problems = []
    database = settings["DATABASES"]["default"]
    if database["ENGINE"] != "django.db.backends.postgresql":
        problems.append("DATABASE_URL is not a PostgreSQL URL: pods cannot share SQLite "
                        "(postgres://user:password@host:5432/gpuplane)")
    elif not database.get("CONN_MAX_AGE"):
        problems.append("DATABASE_CONN_MAX_AGE is 0: a connection per request costs every deploy "
                        "~25 ms; set it to 60 (seconds)")
    if not settings["REDIS_URL"]:
        problems.append("REDIS_URL is not set: the embedded broker and file caches are per pod "
                        "(redis://host:6379/0)")
    return problems


def _tls_problems(settings: Mapping[str, Any]) -> list[str]:
    problems = []
    for name in ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT"):
        if not settings[name]:
            problems.append(f"{name} is off: unset it (production turns it on) or set it to true")
    if settings["SECURE_HSTS_SECONDS"] <= 0:
        problems.append(f"SECURE_HSTS_SECONDS is 0: unset it (production sends {HSTS_SECONDS}) or set it above 0")
    if settings["SECURE_PROXY_SSL_HEADER"] is None:
        problems.append("SECURE_PROXY_SSL_HEADER is not set: behind the TLS-terminating ingress say which "
                        "header proves https, e.g. 'X-Forwarded-Proto: https' (else every request redirects)")
    return problems


def check_production(settings: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> None:
    """Raise ImproperlyConfigured listing every production problem of `settings`; return if none."""
    problems = production_problems(settings, os.environ if environ is None else environ)
    if problems:
        raise ImproperlyConfigured(
            f"GPUPLANE_ENV={PRODUCTION} refuses to start:\n" + "\n".join(f"  - {problem}" for problem in problems)
        )
