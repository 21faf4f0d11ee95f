"""GET /healthz: 200 when the database and the broker answer, 503 naming the one that does not.

The probes come as the kubelet sends them: plain http, the pod's IP as Host, no session.
"""
from __future__ import annotations

import json

import pytest
from django.db.utils import OperationalError

from gpuplane import health

pytestmark = pytest.mark.django_db

KUBELET = {"HTTP_HOST": "10.1.2.3:8000"}  # a pod IP: in no ALLOWED_HOSTS


def _get(client, **extra):
    response = client.get("/healthz", **KUBELET, **extra)
    return response.status_code, json.loads(response.content)


def test_it_answers_200_when_database_and_broker_answer(client):
    status, body = _get(client)

    assert status == 200
    assert body == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}


def test_it_answers_before_the_host_check_and_the_https_redirect(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["gpuplane.example.com"]

    status, _ = _get(client)
    assert status == 200
    # The same request elsewhere is refused by the host check: /healthz really skips it.
    assert client.get("/accounts/login/", **KUBELET).status_code == 400


def test_a_database_that_does_not_answer_is_a_503_naming_it(client, monkeypatch):
    def broken() -> None:
        raise OperationalError("connection to server at \"db\" failed: password for postgres://u:hunter2@db/x")

    monkeypatch.setitem(health.CHECKS, "database", broken)

    status, body = _get(client)

    assert status == 503
    assert body["failed"] == ["database"]
    assert body["checks"]["broker"] == "ok"
    assert body["checks"]["database"].startswith("OperationalError: connection to server")
    assert "hunter2" not in json.dumps(body)  # credentials never leave the process


def test_a_broker_that_does_not_answer_is_a_503_naming_it(client, settings):
    # A real Redis client against a port nothing listens on: the check's own timeout, no mock.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    health._redis_client.cache_clear()

    status, body = _get(client)

    assert status == 503
    assert body["failed"] == ["broker"]
    assert "ConnectionError" in body["checks"]["broker"]


def test_the_embedded_broker_is_healthy_only_with_its_folder(client, settings, tmp_path):
    settings.CELERY_BROKER_URL = "filesystem://localhost//"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path / "queue")}
    assert _get(client)[0] == 503
    (tmp_path / "queue").mkdir()
    assert _get(client)[0] == 200


def test_only_get_and_head(client):
    assert client.post("/healthz", **KUBELET).status_code == 405
    assert client.head("/healthz", **KUBELET).status_code == 200
