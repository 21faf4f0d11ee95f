"""API tokens stop working when they must (gpuplane/accounts.py, gpuplane/token_api.py): a password
change or a deactivation revokes every token of the user; `DELETE /api/v1/auth/token/` revokes the
caller's own; each revocation is a `token.revoked` audit event."""
from __future__ import annotations

import pytest
from django.contrib.auth.hashers import make_password
from django.test import Client
from knox.models import AuthToken
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def issue(user, address: str = "127.0.0.1") -> str:
    response = APIClient(REMOTE_ADDR=address).post(
        "/api/v1/auth/token/", {"username": user.username, "password": PASSWORD}, format="json")
    assert response.status_code == 200, response.content
    return response.json()["token"]


def works(token: str) -> bool:
    status = APIClient().get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Token {token}").status_code
    assert status in (200, 401)
    return status == 200


def test_a_password_change_revokes_every_token_of_the_user(viewer, operator):
    tokens = [issue(viewer), issue(viewer)]
    others = issue(operator)

    viewer.set_password("a-new-long-password")
    viewer.save()

    assert [works(token) for token in tokens] == [False, False]
    assert works(others)
    assert AuditEvent.objects.filter(verb="token.revoked", reason="its user's password changed").count() == 2
    assert AuditEvent.objects.filter(verb="user.password-changed", object_id=str(viewer.pk)).exists()


def test_a_password_changed_in_the_admin_revokes_and_names_who_changed_it(viewer, admin_user):
    token = issue(viewer)
    admin_user.is_staff = admin_user.is_superuser = True  # Django's admin asks for auth.change_user
    admin_user.save()
    client = Client()
    client.force_login(admin_user)

    response = client.post(f"/admin/auth/user/{viewer.pk}/password/",
                           {"password1": "another-long-one-9", "password2": "another-long-one-9", "usable_password": "true"})

    assert response.status_code == 302, response.content[:2000]
    assert not works(token)
    event = AuditEvent.objects.get(verb="user.password-changed")
    assert event.actor == admin_user.username


def test_deactivation_revokes_every_token(viewer):
    token = issue(viewer)

    viewer.is_active = False
    viewer.save()

    assert not works(token)
    assert not AuthToken.objects.filter(user=viewer).exists()
    assert AuditEvent.objects.filter(verb="user.deactivated", object_id=str(viewer.pk)).exists()
    assert AuditEvent.objects.get(verb="token.revoked").reason == "its user was deactivated"


def test_saving_a_user_for_other_reasons_keeps_the_tokens(viewer):
    token = issue(viewer)
    viewer.first_name = "Vera"
    viewer.save()
    # Signing in again stores last_login: not a password change either.
    assert Client().post("/accounts/login/", {"username": viewer.username, "password": PASSWORD}).status_code == 302

    assert works(token)


def test_a_hash_upgrade_on_sign_in_is_not_a_password_change(viewer, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher",
                                 "django.contrib.auth.hashers.MD5PasswordHasher"]
    token = issue(viewer)
    type(viewer).objects.filter(pk=viewer.pk).update(password=make_password(PASSWORD, hasher="md5"))

    issue(viewer)  # authenticate() re-hashes the password with PBKDF2 and saves it

    assert type(viewer).objects.get(pk=viewer.pk).password.startswith("pbkdf2_")
    assert works(token)
    assert not AuditEvent.objects.filter(verb="user.password-changed").exists()


def test_delete_revokes_the_token_it_is_sent_with_and_only_that_one(viewer):
    kept, revoked = issue(viewer), issue(viewer)

    response = APIClient().delete("/api/v1/auth/token/", HTTP_AUTHORIZATION=f"Token {revoked}")

    assert response.status_code == 204
    assert not works(revoked)
    assert works(kept)
    event = AuditEvent.objects.get(verb="token.revoked")
    assert (event.actor, event.reason) == (viewer.username, "revoked by its owner")
    assert event.object_id == revoked[:15]


def test_delete_all_revokes_every_token_of_the_caller_only(viewer, operator):
    mine = [issue(viewer), issue(viewer)]
    theirs = issue(operator)

    response = APIClient().delete("/api/v1/auth/token/?all=true", HTTP_AUTHORIZATION=f"Token {mine[0]}")

    assert response.status_code == 204
    assert [works(token) for token in mine] == [False, False]
    assert works(theirs)


def test_a_user_without_a_role_may_still_revoke_their_own_token(outsider):
    token = issue(outsider)
    assert APIClient().delete("/api/v1/auth/token/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 204
    assert not AuthToken.objects.exists()


def test_delete_needs_credentials_and_says_what_to_send(viewer):
    assert APIClient().delete("/api/v1/auth/token/").status_code == 401
    session = APIClient()
    session.force_login(viewer)
    refused = session.delete("/api/v1/auth/token/")
    assert refused.status_code == 400
    assert "all=true" in refused.json()["detail"]
    assert session.delete("/api/v1/auth/token/?all=maybe").json() == {
        "all": ["Write all=true, or leave it out to revoke this token only."]}


def test_a_revoked_token_is_refused_with_401_not_ignored(viewer):
    token = issue(viewer)
    APIClient().delete("/api/v1/auth/token/", HTTP_AUTHORIZATION=f"Token {token}")

    assert APIClient().delete("/api/v1/auth/token/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401
