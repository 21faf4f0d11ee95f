"""`GET /healthz`: can this process serve? It reaches the database and the Celery broker.

Kubernetes' readiness and liveness probes and the image's HEALTHCHECK call it every few seconds,
so it is cheap (one `SELECT 1`, one Redis `PING`) and answered by the first middleware: before
the host check (the kubelet sends the pod's IP as Host), the https redirect (probes speak plain
http), sessions and authentication. 200 `{"status": "ok", ...}` when both answer, else 503 naming
what failed and why, credentials masked; it never raises.
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse

from gpuplane.redaction import mask_url_credentials

HEALTH_PATH = "/healthz"
BROKER_TIMEOUT_S = 2.0


def check_database() -> None:
    """Raise unless the default database answers a query."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


@cache
def _redis_client(url: str) -> Any:
    import redis

    # One pool per process: a probe every few seconds must not open a connection each time.
    return redis.Redis.from_url(url, socket_connect_timeout=BROKER_TIMEOUT_S, socket_timeout=BROKER_TIMEOUT_S)


def check_broker() -> None:
    """Raise unless the Celery broker can take messages: Redis answers PING, or the embedded
    broker's folders are there and writable."""
    url = settings.CELERY_BROKER_URL
    if url.startswith(("redis://", "rediss://", "unix://")):
        _redis_client(url).ping()
    elif url.startswith("filesystem://"):
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OSError(f"the embedded broker's folder {folder} is missing or not writable")
    # memory:// (the test suite's) lives in the process: nothing to reach.


CHECKS: dict[str, Callable[[], None]] = {"database": check_database, "broker": check_broker}


def health() -> tuple[int, dict[str, object]]:
    """The status code and body of /healthz: each check's "ok" or its error, 503 if any failed."""
    results: dict[str, str] = {}
    for name, check in CHECKS.items():
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - any failure means "not healthy", said in the body
            results[name] = mask_url_credentials(f"{type(exc).__name__}: {exc}")[:300]
        else:
            results[name] = "ok"
    failed = [name for name, result in results.items() if result != "ok"]
    body: dict[str, object] = {"status": "fail" if failed else "ok", "checks": results}
    if failed:
        body["failed"] = failed
    return (503 if failed else 200), body


class HealthCheckMiddleware:
    """Answers GET/HEAD /healthz itself; every other request goes on down the middleware."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path != HEALTH_PATH:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            return HttpResponse(status=405, headers={"Allow": "GET, HEAD"})
        status, body = health()
        return HttpResponse(json.dumps(body), status=status, content_type="application/json",
                            headers={"Cache-Control": "no-store"})
