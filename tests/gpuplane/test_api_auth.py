"""Who may use the REST API, and how they prove who they are.

Anonymous: 401 (with WWW-Authenticate, because token auth is tried first). Authenticated
without a role: 403. Viewer and up: read. Writes on the read-only inventory: 405 for roles that
may write (operator, admin), 403 for a viewer. Credentials: a token from
`POST /api/v1/auth/token/`, or the session from logging in at `/admin/login/` (staff only).
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from knox.models import AuthToken
from rest_framework.test import APIClient

from tests.conftest import PASSWORD
from tests.nodes.factories import make_node

pytestmark = pytest.mark.django_db

LIST_URLS = ["/api/v1/nodes/", "/api/v1/gpus/", "/api/v1/partitions/"]
DETAIL_URLS = ["/api/v1/nodes/n1/", "/api/v1/gpus/GPU-n1-0/"]


@pytest.fixture
def node(db):
    return make_node("n1", gpu_count=1)


@pytest.mark.parametrize("url", LIST_URLS + DETAIL_URLS)
def test_it_answers_401_with_a_challenge_to_anonymous_users(api, node, url):
    response = api.get(url)

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("url", LIST_URLS + DETAIL_URLS)
def test_it_answers_403_to_a_user_without_a_role(api, outsider, node, url):
    api.force_authenticate(outsider)

    assert api.get(url).status_code == 403


@pytest.mark.parametrize("role_fixture", ["viewer", "operator", "admin_user"])
@pytest.mark.parametrize("url", LIST_URLS + DETAIL_URLS)
def test_it_lets_every_role_read(api, node, url, role_fixture, request):
    api.force_authenticate(request.getfixturevalue(role_fixture))

    assert api.get(url).status_code == 200


def test_it_treats_a_superuser_as_admin(api, node):
    api.force_authenticate(User.objects.create_superuser("root", password=PASSWORD))

    assert api.get("/api/v1/nodes/").status_code == 200
    assert api.delete("/api/v1/nodes/n1/").status_code == 405


@pytest.mark.parametrize(
    "role_fixture, expected",
    [("viewer", 403), ("operator", 405), ("admin_user", 405)],
)
@pytest.mark.parametrize(
    "method, url",
    [
        ("post", "/api/v1/nodes/"),
        ("put", "/api/v1/nodes/n1/"),
        ("delete", "/api/v1/nodes/n1/"),
        ("post", "/api/v1/gpus/"),
        ("delete", "/api/v1/gpus/GPU-n1-0/"),
        ("post", "/api/v1/partitions/"),
    ],
)
def test_it_refuses_writes_by_role(api, node, method, url, role_fixture, expected, request):
    api.force_authenticate(request.getfixturevalue(role_fixture))

    assert getattr(api, method)(url, {"name": "x"}, format="json").status_code == expected


def test_it_answers_401_to_an_anonymous_write(api, node):
    assert api.post("/api/v1/nodes/", {"name": "x"}, format="json").status_code == 401


def test_it_accepts_a_token_in_the_authorization_header(viewer, node):
    _token, key = AuthToken.objects.create(user=viewer)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    response = client.get("/api/v1/nodes/")

    assert response.status_code == 200
    assert response.json()["results"][0]["name"] == "n1"


def test_it_refuses_an_unknown_token(node):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token 0123456789abcdef0123456789abcdef01234567")

    response = client.get("/api/v1/nodes/")

    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid token."


def test_it_still_checks_the_role_of_a_token_user(outsider, node):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=outsider)[1]}")

    assert client.get("/api/v1/nodes/").status_code == 403


def test_it_issues_a_token_for_a_username_and_password(viewer, node):
    client = APIClient()

    response = client.post("/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD}, format="json")

    assert response.status_code == 200
    key = response.json()["token"]
    assert AuthToken.objects.filter(user=viewer).count() == 1
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/nodes/").status_code == 200


def test_it_issues_a_new_token_each_time_and_both_work(viewer, node):
    # Only digests are stored, so an issued key cannot be shown again: each request makes a new one.
    client = APIClient()
    credentials = {"username": viewer.username, "password": PASSWORD}

    first = client.post("/api/v1/auth/token/", credentials, format="json").json()["token"]
    second = client.post("/api/v1/auth/token/", credentials, format="json").json()["token"]

    assert first != second
    for key in (first, second):
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        assert client.get("/api/v1/nodes/").status_code == 200


@pytest.mark.parametrize(
    "credentials",
    [
        {"username": "vera-viewer", "password": "wrong"},
        {"username": "nobody", "password": PASSWORD},
        {"username": "vera-viewer"},
        {},
    ],
)
def test_it_refuses_a_token_for_bad_credentials(viewer, credentials):
    response = APIClient().post("/api/v1/auth/token/", credentials, format="json")

    assert response.status_code == 400
    assert not AuthToken.objects.exists()


def test_it_accepts_the_session_from_the_admin_login_page(admin_user, node):
    # /admin/login/ admits staff only; the role (not is_staff) is what the API checks.
    admin_user.is_staff = True
    admin_user.save()
    client = Client()

    login = client.post("/admin/login/", {"username": admin_user.username, "password": PASSWORD, "next": "/admin/"})

    assert login.status_code == 302 and login["Location"] == "/admin/"
    response = client.get("/api/v1/nodes/")
    assert response.status_code == 200
    assert response.json()["count"] == 1


def test_it_gives_no_role_for_being_staff(outsider, node):
    outsider.is_staff = True
    outsider.save()
    client = Client()

    client.post("/admin/login/", {"username": outsider.username, "password": PASSWORD, "next": "/admin/"})

    assert client.get("/api/v1/nodes/").status_code == 403


def test_it_does_not_log_in_a_non_staff_user_through_the_admin_page(viewer, node):
    client = Client()

    login = client.post("/admin/login/", {"username": viewer.username, "password": PASSWORD, "next": "/admin/"})

    assert login.status_code == 200  # the form again, with an error
    assert client.get("/api/v1/nodes/").status_code == 401


def test_it_requires_csrf_for_session_writes(admin_user, node):
    # Session auth must not let another site make a logged-in browser write: DRF checks CSRF
    # before the method is refused, so the answer is 403, not 405.
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(admin_user)

    assert client.get("/api/v1/nodes/").status_code == 200
    assert client.post("/api/v1/nodes/", {"name": "x"}, format="json").status_code == 403


def test_it_lists_the_endpoints_at_the_api_root(viewer_api, api):
    assert api.get("/api/v1/").status_code == 401

    body = viewer_api.get("/api/v1/").json()

    assert body["nodes"] == "http://testserver/api/v1/nodes/"
    assert body["gpus"] == "http://testserver/api/v1/gpus/"
    assert body["partitions"] == "http://testserver/api/v1/partitions/"


def test_a_viewer_signs_in_on_the_gpuplane_page_and_the_api_accepts_the_session(viewer, node):
    client = Client()

    login = client.post("/accounts/login/", {"username": viewer.username, "password": PASSWORD, "next": "/nodes/"})

    assert login.status_code == 302 and login["Location"] == "/nodes/"
    response = client.get("/api/v1/nodes/")
    assert response.status_code == 200
    assert response.json()["count"] == 1


def test_the_sign_in_page_refuses_a_wrong_password(viewer):
    client = Client()

    response = client.post("/accounts/login/", {"username": viewer.username, "password": "wrong"})

    assert response.status_code == 200
    assert "Please enter a correct username and password" in response.content.decode()
    assert client.get("/api/v1/nodes/").status_code == 401
