"""Sign-in limits in sliding windows, per address and per account (gpuplane/ratelimits.py).

A fixed window lets twice the rate through in a burst across its edge (issue 23 saw 20 guesses
pass a 10/m limit); a sliding window weighs the previous window by how much of it still overlaps
the last period. Failed sign-ins also count per account, from any address, on the pages and the
token endpoint together.
"""
from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from gpuplane import ratelimits
from gpuplane.ratelimits import Rate, parse_rate, seconds_to_wait
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    moment = Clock(600_000.0)  # a window edge for periods of 1 minute and 5 minutes alike
    monkeypatch.setattr(ratelimits, "clock", moment)
    return moment


def wrong(username: str) -> dict[str, str]:
    return {"username": username, "password": "not-the-password"}


@pytest.mark.parametrize(("text", "rate"), [("10/m", Rate(10, 60)), ("5/10m", Rate(5, 600)), ("100/h", Rate(100, 3600)),
                                            ("2000/d", Rate(2000, 86400)), ("1/s", Rate(1, 1))])
def test_rates_read_as_a_count_per_period(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize(("current", "previous", "elapsed", "expected"), [
    (0, 0, 0.0, None),
    (9, 0, 30.0, None),   # 9 < 10
    (10, 0, 30.0, 36),    # full: 30 s to the next window, then ceil(10 * (1 - t/60)) <= 9 from t = 6 s
    (0, 10, 0.0, 6),      # ceil(10 * 1) = 10 is full; ceil(10 * (1 - 6/60)) = 9 < 10
    (5, 10, 30.0, 6),     # 5 + ceil(10 * 0.5) = 10 is full; at 36 s: 5 + ceil(10 * 0.4) = 9
    (5, 10, 36.0, None),  # ... which is now
    (4, 10, 30.0, None),  # 4 + 5 = 9
])
def test_the_sliding_count_and_the_wait(current, previous, elapsed, expected):
    assert seconds_to_wait(current, previous, elapsed, Rate(10, 60)) == expected


def test_a_burst_across_the_window_edge_gets_no_more_than_the_rate(viewer, settings, clock):
    settings.GPUPLANE_LOGIN_RATE = "10/m"
    settings.GPUPLANE_ACCOUNT_SIGN_IN_RATE = "1000/m"  # this test is about the address
    clock.now += 59.5  # the last half second of a window
    before_edge = [Client().post("/accounts/login/", wrong("x")).status_code for _ in range(10)]
    clock.now += 1.0  # just past the edge: a fixed window would start again from 0
    after_edge = [Client().post("/accounts/login/", wrong("x")).status_code for _ in range(10)]

    assert before_edge == [200] * 10
    assert after_edge == [429] * 10
    limited = Client().post("/accounts/login/", wrong("x"))
    assert 1 <= int(limited["Retry-After"]) <= 60
    # As the burst slides out of the last minute, guesses get through again, one at a time.
    clock.now += 7
    assert [Client().post("/accounts/login/", wrong("x")).status_code for _ in range(2)] == [200, 429]
    clock.now += 60
    assert Client().post("/accounts/login/", {"username": viewer.username, "password": PASSWORD}).status_code == 302


def test_failed_sign_ins_count_per_account_from_any_address(viewer, operator, settings, clock):
    settings.GPUPLANE_ACCOUNT_SIGN_IN_RATE = "3/5m"
    answers = [Client(REMOTE_ADDR=f"10.0.0.{n}").post("/accounts/login/", wrong(viewer.username)).status_code
               for n in range(1, 5)]

    assert answers == [200, 200, 200, 429]
    # Not even the right password, from a fresh address: the account waits.
    right = Client(REMOTE_ADDR="10.9.9.9").post("/accounts/login/", {"username": viewer.username, "password": PASSWORD})
    assert right.status_code == 429
    assert 1 <= int(right["Retry-After"]) <= 600  # at most two periods
    # Another account is not held back, and the username's case does not make a new budget.
    assert Client().post("/accounts/login/", wrong(operator.username)).status_code == 200
    assert Client().post("/accounts/login/", wrong(viewer.username.upper())).status_code == 429


def test_the_token_endpoint_shares_the_account_budget(viewer, settings, clock):
    settings.GPUPLANE_ACCOUNT_SIGN_IN_RATE = "3/5m"
    for n in range(2):
        Client(REMOTE_ADDR=f"10.0.1.{n}").post("/admin/login/", wrong(viewer.username))
    assert APIClient(REMOTE_ADDR="10.0.2.1").post("/api/v1/auth/token/", wrong(viewer.username), format="json").status_code == 400

    limited = APIClient(REMOTE_ADDR="10.0.2.2").post(
        "/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD}, format="json")

    assert limited.status_code == 429
    assert int(limited["Retry-After"]) >= 1
    clock.now += 600  # two periods later the failures have slid out
    assert APIClient().post("/api/v1/auth/token/", {"username": viewer.username, "password": PASSWORD},
                            format="json").status_code == 200


def test_successful_sign_ins_do_not_use_the_account_budget(viewer, settings, clock):
    settings.GPUPLANE_ACCOUNT_SIGN_IN_RATE = "2/5m"
    settings.GPUPLANE_LOGIN_RATE = "100/m"
    answers = [Client().post("/accounts/login/", {"username": viewer.username, "password": PASSWORD}).status_code
               for _ in range(5)]
    assert answers == [302] * 5
