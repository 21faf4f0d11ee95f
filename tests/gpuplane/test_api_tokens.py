"""API tokens are stored as digests with an expiry (gpuplane/tokens.py, django-rest-knox), and the
tokens DRF's authtoken kept in plain text are migrated to digests (gpuplane migration 0001)."""
from __future__ import annotations

from datetime import timedelta
from importlib import import_module
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LEGACY_KEY = "0123456789abcdef0123456789abcdef01234567"  # the shape of a DRF authtoken key


def database_text() -> str:
    """Every value of every row of every table, as one string (what a stolen database file holds)."""
    parts: list[str] = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            parts.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(parts)


def issue(client: APIClient, user) -> str:
    response = client.post("/api/v1/auth/token/", {"username": user.username, "password": PASSWORD}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["token"]


def test_the_database_never_contains_an_issued_token(viewer):
    client = APIClient()
    key = issue(client, viewer)

    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/nodes/").status_code == 200  # used once, still not stored
    assert len(key) >= 40
    assert key not in database_text()
    assert AuthToken.objects.get(user=viewer).digest != key


def test_an_issued_token_carries_its_expiry(viewer, settings):
    response = APIClient().post("/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD}, format="json")

    expiry = AuthToken.objects.get(user=viewer).expiry
    assert response.json()["expiry"].startswith(expiry.strftime("%Y-%m-%dT%H:%M"))
    expected = timezone.now() + timedelta(hours=settings.GPUPLANE_API_TOKEN_TTL_H)
    assert abs((expiry - expected).total_seconds()) < 60


def test_an_expired_token_is_refused_and_removed(viewer):
    client = APIClient()
    key = issue(client, viewer)
    AuthToken.objects.update(expiry=timezone.now() - timedelta(seconds=1))

    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    assert client.get("/api/v1/nodes/").status_code == 401
    assert not AuthToken.objects.exists()


def test_the_token_endpoint_refuses_unknown_fields_and_non_string_credentials(viewer):
    client = APIClient()

    unknown = client.post(
        "/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD, "ttl": 99}, format="json"
    )
    numeric = client.post("/api/v1/auth/token/", {"username": 7, "password": PASSWORD}, format="json")

    assert unknown.status_code == 400 and "Unknown field" in unknown.json()["ttl"][0]
    assert numeric.status_code == 400 and "username" in numeric.json()
    assert not AuthToken.objects.exists()


# ---- migrating the plain-text tokens of DRF's authtoken ---------------------------------------------


@pytest.fixture
def legacy_table(viewer):
    """The authtoken_token table as DRF left it, holding one plain-text key of the viewer."""
    created = timezone.now() - timedelta(days=90)
    timestamp = "datetime" if connection.vendor == "sqlite" else "timestamp with time zone"
    with connection.cursor() as cursor:
        cursor.execute(
            f'CREATE TABLE authtoken_token ("key" varchar(40) NOT NULL PRIMARY KEY, created {timestamp} NOT NULL, '
            "user_id integer NOT NULL UNIQUE)"
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, %s, %s)", [LEGACY_KEY, created, viewer.pk])
    yield created
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE authtoken_token")


def run_token_migration() -> None:
    # The function reads only the editor's connection; a real SQLite schema editor cannot open
    # inside the test's transaction.
    migration = import_module("gpuplane.migrations.0001_hash_api_tokens")
    migration.hash_legacy_tokens(apps, SimpleNamespace(connection=connection))


def test_the_migration_keeps_legacy_tokens_working_and_drops_the_plain_text(viewer, legacy_table):
    assert LEGACY_KEY in database_text()  # the test can see a stored key

    run_token_migration()

    assert LEGACY_KEY not in database_text()
    token = AuthToken.objects.get(user=viewer)
    assert token.expiry > timezone.now() and token.created == legacy_table
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {LEGACY_KEY}")
    assert client.get("/api/v1/nodes/").status_code == 200
    client.credentials(HTTP_AUTHORIZATION=f"Token {LEGACY_KEY[:-1]}0")
    assert client.get("/api/v1/nodes/").status_code == 401


def test_the_migration_does_nothing_on_a_database_without_the_legacy_table(viewer):
    run_token_migration()

    assert not AuthToken.objects.exists()
