"""Sign-ins, failed sign-ins, tokens and role changes are audit events (gpuplane/accounts.py)."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from rest_framework.test import APIClient

from gpuplane.roles import ADMIN, OPERATOR, VIEWER
from lifecycle.models import AuditEvent
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_events_from_fixtures(viewer, operator, admin_user):
    """The role fixtures gave their users a role, which is recorded too: start from an empty trail."""
    AuditEvent.objects.all().delete()


def only(verb: str) -> AuditEvent:
    return AuditEvent.objects.get(verb=verb)


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_a_sign_in_is_an_event_of_the_user(viewer, url):
    viewer.is_staff = True  # the admin login admits staff only
    viewer.save()
    response = Client(REMOTE_ADDR="10.1.1.1").post(url, {"username": viewer.username, "password": PASSWORD})
    assert response.status_code == 302

    event = only("user.signed-in")
    assert (event.actor, event.object_type, event.object_id) == (viewer.username, "auth.user", str(viewer.pk))
    assert f"from 10.1.1.1, {url}" in event.reason


@pytest.mark.parametrize(("username", "why"), [
    ("vera-viewer", "wrong password"),
    ("nobody-at-all", "no such user"),
])
def test_a_failed_sign_in_is_an_event_that_says_why(viewer, username, why):
    Client(REMOTE_ADDR="10.2.2.2").post("/accounts/login/", {"username": username, "password": "guess"})

    event = only("user.sign-in-failed")
    assert event.actor == "anonymous"
    assert event.object_repr == username
    assert event.reason.startswith(why)
    assert event.object_id == (str(viewer.pk) if username == viewer.username else "")
    assert not AuditEvent.objects.filter(verb="user.signed-in").exists()


def test_an_inactive_account_fails_with_that_reason(viewer):
    viewer.is_active = False
    viewer.save()
    APIClient().post("/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD}, format="json")

    assert only("user.sign-in-failed").reason.startswith("account inactive")


def test_token_requests_are_events_too(viewer):
    APIClient().post("/api/v1/auth/token/", {"username": viewer.username, "password": "guess"}, format="json")
    token = APIClient().post("/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD},
                             format="json").json()["token"]

    assert only("user.sign-in-failed").reason.startswith("wrong password")
    created = only("token.created")
    assert (created.actor, created.object_type, created.object_id) == (viewer.username, "knox.authtoken", token[:15])
    assert token not in str(list(AuditEvent.objects.values()))  # the key itself is never stored


def test_signing_out_is_an_event(viewer):
    client = Client()
    client.post("/accounts/login/", {"username": viewer.username, "password": PASSWORD})
    client.post("/accounts/logout/")

    assert only("user.signed-out").actor == viewer.username


def test_role_changes_from_either_side_are_events_with_before_and_after(viewer):
    operators = Group.objects.get_or_create(name=OPERATOR)[0]
    viewer.groups.add(operators)
    operators.user_set.remove(viewer)
    viewer.groups.clear()

    events = list(AuditEvent.objects.filter(verb="user.role-changed").order_by("id"))
    assert [(e.before, e.after) for e in events] == [
        ({"role": VIEWER}, {"role": OPERATOR}),
        ({"role": OPERATOR}, {"role": VIEWER}),
        ({"role": VIEWER}, {"role": "none"}),
    ]
    assert [e.reason for e in events] == [f"added to {OPERATOR}", f"removed from {OPERATOR}", "removed from every group"]
    assert all(e.object_id == str(viewer.pk) for e in events)


def test_a_group_that_is_no_role_changes_no_role(viewer):
    viewer.groups.add(Group.objects.create(name="book-club"))
    assert not AuditEvent.objects.filter(verb="user.role-changed").exists()


def test_the_superuser_flag_is_a_role_change(viewer):
    viewer.is_superuser = True
    viewer.save()

    event = only("user.role-changed")
    assert (event.before, event.after, event.reason) == ({"role": VIEWER}, {"role": ADMIN}, "superuser granted")


def test_a_role_given_in_the_django_admin_names_the_admin(viewer, admin_user):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client = Client()
    client.force_login(admin_user)
    form = client.get(f"/admin/auth/user/{viewer.pk}/change/").context["adminform"].form
    data = {name: value for name, value in form.initial.items() if value is not None and name != "password"}
    data.update(groups=[Group.objects.get_or_create(name=ADMIN)[0].pk], date_joined_0="2026-01-01",
                date_joined_1="00:00:00", last_login_0="", last_login_1="")
    data.pop("user_permissions", None)
    data.pop("date_joined", None)
    data.pop("last_login", None)

    AuditEvent.objects.all().delete()

    response = client.post(f"/admin/auth/user/{viewer.pk}/change/", data)

    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else response
    # The admin's form sets the groups: it removes the old one, then adds the new one.
    events = AuditEvent.objects.filter(verb="user.role-changed").order_by("id")
    assert [(e.actor, e.before, e.after) for e in events] == [
        (admin_user.username, {"role": VIEWER}, {"role": "none"}),
        (admin_user.username, {"role": "none"}, {"role": ADMIN}),
    ]
