"""`/api/v1/audit-events/`: viewer and up may read; filterable by object_type, object_id, verb."""
from __future__ import annotations

import pytest

from lifecycle.audit import record
from lifecycle.models import AuditEvent

pytestmark = pytest.mark.django_db
URL = "/api/v1/audit-events/"


@pytest.fixture
def events():
    record("deployment.created", ("scheduler.deployment", 1), actor="alice", reason="deploy", object_repr="default/a")
    record("deployment.deleted", ("scheduler.deployment", 1), actor="bob")
    record("node.updated", ("nodes.node", 7), actor="system:inventory-sync", before={"ready": True},
           after={"ready": False})


def test_it_answers_401_to_anonymous_users(api, events):
    assert api.get(URL).status_code == 401


def test_it_answers_403_to_a_user_without_a_role(api, outsider, events):
    api.force_authenticate(outsider)
    assert api.get(URL).status_code == 403


def test_a_viewer_reads_the_trail_newest_first(viewer_api, events):
    # The fixtures' users were given their roles: recorded too (gpuplane/accounts.py), not counted here.
    AuditEvent.objects.filter(verb="user.role-changed").delete()
    response = viewer_api.get(URL)

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    first = body["results"][0]
    assert first["verb"] == "node.updated"
    assert {"at", "actor", "verb", "object_type", "object_id", "reason"} <= set(first)
    assert (first["before"], first["after"]) == ({"ready": True}, {"ready": False})


@pytest.mark.parametrize("query, verbs", [
    ("object_type=scheduler.deployment", {"deployment.created", "deployment.deleted"}),
    ("object_type=scheduler.deployment&object_id=1&verb=deployment.created", {"deployment.created"}),
    ("object_type=nodes.node&object_id=1", set()),
    ("verb=node.updated", {"node.updated"}),
    ("actor=bob", {"deployment.deleted"}),
])
def test_it_filters(viewer_api, events, query, verbs):
    response = viewer_api.get(f"{URL}?{query}")

    assert response.status_code == 200
    assert {e["verb"] for e in response.json()["results"]} == verbs


@pytest.mark.parametrize("query", ["verb=%00", "object_id=a%00b", "at__gte=yesterday", "ordering=secret"])
def test_bad_filters_are_400(viewer_api, events, query):
    assert viewer_api.get(f"{URL}?{query}").status_code == 400


def test_it_is_read_only(api, admin_user, events):
    api.force_authenticate(admin_user)
    assert api.post(URL, {"verb": "x"}, format="json").status_code in (403, 405)
    event_id = api.get(URL).json()["results"][0]["id"]
    assert api.get(f"{URL}{event_id}/").status_code == 200
    assert api.delete(f"{URL}{event_id}/").status_code in (403, 405)


def test_a_time_with_an_offset_postgresql_refuses_is_compared_in_utc(viewer_api, events):
    # ISO 8601 allows +16:55; PostgreSQL does not ("time zone displacement out of range"): a 500 before.
    response = viewer_api.get("/api/v1/audit-events/", {"at__gte": "2020-07-22T21:47:35+16:55"})
    assert response.status_code == 200, response.content
