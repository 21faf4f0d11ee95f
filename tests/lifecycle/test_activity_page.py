"""`/activity/` and `/api/v1/audit-events/`: every audit event for admins; for other roles the
cluster's events and their own account's, never another user's sign-ins or tokens."""
from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from lifecycle.audit import record
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def trail(viewer, operator, admin_user):
    """A cluster event, and sign-ins of the viewer and of the operator."""
    record("deployment.created", ("scheduler.deployment", 7), actor=operator, object_repr="chat", reason="deployed")
    for user in (viewer, operator):
        Client().post("/accounts/login/", {"username": user.username, "password": PASSWORD})
    Client().post("/accounts/login/", {"username": operator.username, "password": "wrong"})


def page(user, query: str = "") -> str:
    client = Client()
    client.force_login(user)
    response = client.get(f"/activity/{query}")
    assert response.status_code == 200
    return response.content.decode()


def api_verbs(user) -> list[tuple[str, str]]:
    client = APIClient()
    client.force_authenticate(user)
    rows = client.get("/api/v1/audit-events/?limit=500").json()["results"]
    return sorted((row["actor"], row["verb"]) for row in rows)


def test_an_admin_sees_every_event(trail, admin_user):
    html = page(admin_user)
    assert "deployment.created" in html
    assert html.count("user.signed-in") >= 2 and "user.sign-in-failed" in html
    assert ("otto-operator", "user.signed-in") in api_verbs(admin_user)


def test_others_see_the_cluster_and_their_own_account_only(trail, viewer, operator):
    html = page(viewer)
    assert "deployment.created" in html
    assert "vera-viewer" in html and "user.signed-in" in html
    assert "user.sign-in-failed" not in html  # the operator's failed sign-in is the operator's business
    seen = api_verbs(viewer)
    assert ("otto-operator", "deployment.created") in seen
    assert ("vera-viewer", "user.signed-in") in seen
    client = APIClient()
    client.force_authenticate(viewer)
    rows = client.get("/api/v1/audit-events/?object_type=auth.user&limit=500").json()["results"]
    assert rows and {row["object_id"] for row in rows} == {str(viewer.pk)}
    # The operator does see the failed sign-in on their own account, made by "anonymous".
    assert ("anonymous", "user.sign-in-failed") in api_verbs(operator)


def test_the_page_filters_like_the_api(trail, admin_user):
    html = page(admin_user, "?verb=user.sign-in-failed")
    assert "user.sign-in-failed" in html and "deployment.created" not in html
    assert "1 event match the filters" in html
    assert 'href="/api/v1/audit-events/?verb=user.sign-in-failed"' in html


def test_a_bad_filter_shows_its_message_not_a_500(trail, admin_user):
    html = page(admin_user, "?at__gte=yesterday")
    assert "Enter a valid date/time" in html or "ISO 8601" in html


def test_the_page_needs_a_role(outsider):
    client = Client()
    client.force_login(outsider)
    assert client.get("/activity/").status_code == 403
    assert Client().get("/activity/").status_code == 302  # to the sign-in page


def test_the_navigation_links_the_page(viewer):
    assert 'href="/activity/"' in page(viewer)
