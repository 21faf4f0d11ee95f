"""Password guessing is rate-limited (gpuplane/ratelimits.py): the sign-in pages and the token endpoint
answer 429 with Retry-After past the configured rate per client address, and the counters live in
a cache every web worker shares. Sliding windows and the per-account budget: test_sign_in_windows.py."""
from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from gpuplane.env import env_rate
from gpuplane.ratelimits import client_address
from tests.conftest import PASSWORD
from tests.gpuplane.test_settings_env import django_setup

pytestmark = pytest.mark.django_db

WRONG = {"username": "vera-viewer", "password": "wrong"}


@pytest.fixture
def three_a_minute(settings):
    settings.GPUPLANE_LOGIN_RATE = "3/m"
    settings.GPUPLANE_TOKEN_RATE = "3/m"


def retry_after(response) -> int:
    value = int(response["Retry-After"])
    assert 1 <= value <= 120  # a sliding window of a minute: at most until the next window's next minute
    return value


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_the_sign_in_pages_answer_429_with_retry_after_past_the_rate(viewer, three_a_minute, url):
    client = Client()
    answers = [client.post(url, WRONG).status_code for _ in range(3)]

    limited = client.post(url, {"username": viewer.username, "password": PASSWORD})

    assert answers == [200, 200, 200]  # the form again, with its error
    assert limited.status_code == 429
    assert f"Try again in {retry_after(limited)} second" in limited.content.decode()
    # Not even the right password gets through: no password is checked while limited.
    assert "_auth_user_id" not in client.session


def test_both_sign_in_pages_share_one_budget_per_address(viewer, three_a_minute):
    for url in ("/accounts/login/", "/admin/login/", "/accounts/login/"):
        Client().post(url, WRONG)

    assert Client().post("/admin/login/", WRONG).status_code == 429
    other_address = Client(REMOTE_ADDR="10.0.0.9")
    assert other_address.post("/accounts/login/", WRONG).status_code == 200


def test_reading_the_sign_in_page_is_not_counted(viewer, three_a_minute):
    client = Client()
    for _ in range(5):
        assert client.get("/accounts/login/").status_code == 200

    assert client.post("/accounts/login/", {"username": viewer.username, "password": PASSWORD}).status_code == 302


def test_the_token_endpoint_answers_429_with_retry_after_past_the_rate(viewer, three_a_minute):
    client = APIClient()
    credentials = {"username": viewer.username, "password": PASSWORD}
    answers = [client.post("/api/v1/auth/token/", credentials, format="json").status_code for _ in range(3)]

    limited = client.post("/api/v1/auth/token/", credentials, format="json")

    assert answers == [200, 200, 200]
    assert limited.status_code == 429
    retry_after(limited)
    assert "throttled" in limited.json()["detail"].lower()


def test_the_token_endpoint_counts_wrong_passwords_too(viewer, three_a_minute):
    client = APIClient()
    for _ in range(3):
        assert client.post("/api/v1/auth/token/", WRONG, format="json").status_code == 400

    assert client.post("/api/v1/auth/token/", WRONG, format="json").status_code == 429


def test_the_counters_are_shared_between_processes(tmp_path):
    # Two interpreters with the same var/ directory stand for two gunicorn workers without Redis.
    count = (
        "from django.conf import settings\n"
        "from django.test import RequestFactory\n"
        "from gpuplane.ratelimits import SIGN_IN_GROUP, count_post\n"
        "import json\n"
        "request = RequestFactory().post('/accounts/login/', REMOTE_ADDR='10.1.2.3')\n"
        "print(json.dumps([count_post(request, SIGN_IN_GROUP, '3/d') for _ in range({n})]))\n"
    )
    variables = {"GPUPLANE_VAR_DIR": str(tmp_path / "var")}

    first = django_setup(tmp_path, count.replace("{n}", "3"), **variables)
    second = django_setup(tmp_path, count.replace("{n}", "1"), **variables)

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert json.loads(first.stdout.splitlines()[-1]) == [None, None, None]
    assert json.loads(second.stdout.splitlines()[-1])[0] >= 1  # the 4th POST, counted in another process


def test_with_redis_the_counters_live_in_redis(tmp_path):
    code = "from django.conf import settings; print(settings.CACHES[settings.RATELIMIT_USE_CACHE]['BACKEND'])"

    with_redis = django_setup(tmp_path, code, REDIS_URL="redis://127.0.0.1:6399/9")
    without = django_setup(tmp_path, code)

    assert with_redis.stdout.strip().splitlines()[-1] == "django.core.cache.backends.redis.RedisCache"
    assert without.stdout.strip().splitlines()[-1] == "django.core.cache.backends.filebased.FileBasedCache"


@pytest.mark.parametrize("value", ["10/m", "100/h", "5/10m", "1/s", "2000/d"])
def test_env_rate_reads_a_count_per_period(monkeypatch, value):
    monkeypatch.setenv("GPUPLANE_LOGIN_RATE", value)

    assert env_rate("GPUPLANE_LOGIN_RATE", "10/m") == value


@pytest.mark.parametrize("value", ["10", "ten/m", "10/minute", "0/m", "-1/m", "10/m; DROP"])
def test_env_rate_refuses_anything_else(monkeypatch, value):
    monkeypatch.setenv("GPUPLANE_LOGIN_RATE", value)

    with pytest.raises(ImproperlyConfigured, match="GPUPLANE_LOGIN_RATE"):
        env_rate("GPUPLANE_LOGIN_RATE", "10/m")


# ---- which address is counted ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "meta", "expected"),
    [
        ("", {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}, "10.0.0.1"),  # header not trusted
        ("X-Forwarded-For", {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 1.2.3.4"}, "1.2.3.4"),
        ("X-Forwarded-For", {"REMOTE_ADDR": "10.0.0.1"}, "10.0.0.1"),  # header missing
        ("X-Forwarded-For", {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "not-an-ip"}, "10.0.0.1"),
        ("X-Real-IP", {"REMOTE_ADDR": "", "HTTP_X_REAL_IP": "2001:db8::1"}, "2001:db8::1"),
        ("", {"REMOTE_ADDR": ""}, "0.0.0.0"),  # a Unix socket: one shared budget, not a 500
    ],
)
def test_the_client_address_is_remote_addr_or_the_proxy_header_named(settings, header, meta, expected):
    settings.GPUPLANE_CLIENT_IP_HEADER = header

    assert client_address(RequestFactory().post("/accounts/login/", **meta)) == expected


def test_behind_a_proxy_clients_are_counted_apart(viewer, three_a_minute, settings):
    settings.GPUPLANE_CLIENT_IP_HEADER = "X-Forwarded-For"
    via_proxy = {"REMOTE_ADDR": "10.0.0.1"}
    for _ in range(3):
        Client(**via_proxy, HTTP_X_FORWARDED_FOR="1.1.1.1").post("/accounts/login/", WRONG)

    assert Client(**via_proxy, HTTP_X_FORWARDED_FOR="1.1.1.1").post("/accounts/login/", WRONG).status_code == 429
    assert Client(**via_proxy, HTTP_X_FORWARDED_FOR="2.2.2.2").post("/accounts/login/", WRONG).status_code == 200


def test_a_request_without_an_address_is_limited_not_an_error(viewer, three_a_minute):
    answers = [Client(REMOTE_ADDR="").post("/accounts/login/", WRONG).status_code for _ in range(4)]

    assert answers == [200, 200, 200, 429]
