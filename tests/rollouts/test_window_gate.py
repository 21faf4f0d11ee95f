"""The maintenance window in a rollout (rollouts/windows.py): nodes start changing only inside
it, a node in flight finishes after it closes, and the API, form and preview carry it."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from rollouts.choices import NodeState, RolloutStatus
from rollouts.forms import RolloutForm
from rollouts.models import RollingUpdate
from rollouts.windows import waiting_message
from scheduler.models import Placement
from tests.rollouts.cluster import nodes, replica
from tests.rollouts.simulated import mps_cluster, tick
from tests.rollouts.test_reconciler import run, started
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

URL = "/api/v1/rollouts/"
# Saturdays 02:00 Berlin time for one minute: 2026-01-03 01:00-01:01 UTC (CET), then 2026-01-10.
SATURDAY = {"cron": "0 2 * * SAT", "duration_minutes": 1, "timezone": "Europe/Berlin"}


def utc(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def now_of(clock: FakeClock) -> datetime:
    return datetime.fromtimestamp(clock.now, UTC)


def test_nodes_wait_for_the_window_a_node_in_flight_finishes_after_it_closes_the_next_waits_again():
    clock = FakeClock(utc("2026-01-03T00:50:00+00:00"))  # Sat 01:50 CET: closed for 10 minutes
    cluster = mps_cluster(clock, node_count=3, deployments=2)
    busy = sorted({p.node.name for p in Placement.objects.select_related("node")})
    rollout = started(cluster, names=busy, maintenance_window=SATURDAY, max_unavailable=1)
    for _ in range(5):
        tick(cluster, clock)
    assert {s.state for s in rollout.nodes.all()} == {NodeState.PENDING}
    waiting = "waiting for the maintenance window (opens 2026-01-03 02:00 CET, Europe/Berlin)"
    assert rollout.nodes.get(batch_index=1).reason == waiting  # the batch whose turn it is
    rollout.refresh_from_db()
    assert waiting_message(rollout, now_of(clock)) == waiting
    assert not AuditEvent.objects.filter(verb="rolloutnode.prewarming").exists()

    clock.now = utc("2026-01-03T01:00:50+00:00")  # 02:00:50 CET: 10 seconds of the window left
    tick(cluster, clock)
    first = rollout.nodes.get(state=NodeState.PREWARMING)
    rollout = run(cluster, clock, rollout, ticks=60)  # the window closes while it works

    first.refresh_from_db()
    assert first.state == NodeState.SUCCEEDED  # in flight when it closed: finished
    assert clock.now > utc("2026-01-03T01:01:00+00:00")
    second = rollout.nodes.get(state=NodeState.PENDING)
    assert second.reason == "waiting for the maintenance window (opens 2026-01-10 02:00 CET, Europe/Berlin)"
    assert rollout.status == RolloutStatus.RUNNING
    assert waiting_message(rollout, now_of(clock)) == second.reason

    clock.now = utc("2026-01-10T01:00:00+00:00")
    rollout = run(cluster, clock, rollout)
    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert waiting_message(rollout, now_of(clock)) == ""


def test_without_a_window_nothing_waits():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=2, deployments=1)
    rollout = started(cluster, names=["gpu-1"])
    tick(cluster, clock)
    assert rollout.nodes.get().state == NodeState.PREWARMING
    rollout.refresh_from_db()
    assert waiting_message(rollout, now_of(clock)) == ""


# ---- API, form, preview ----------------------------------------------------------------------------


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


@pytest.fixture
def inventory():
    a, b, c = nodes("gpu-a", "gpu-b", "gpu-c")
    replica(a, "chat")


def body(**overrides):
    return {"name": "ts4", "nodes": ["gpu-a"], "config": {"mode": "timeslice", "replicas": 4}, **overrides}


def closed_for_two_hours() -> dict:
    """A daily one-minute window two hours from now: closed whenever the test runs."""
    opens = datetime.now(UTC) + timedelta(hours=2)
    return {"cron": f"{opens.minute} {opens.hour} * * *", "duration_minutes": 1, "timezone": "UTC"}


def test_the_api_stores_and_returns_the_window_and_move_back(operator_api, inventory):
    window = {"cron": " 0 2  * * SAT", "duration_minutes": 240, "timezone": "Europe/Berlin"}
    created = operator_api.post(URL, body(maintenance_window=window, move_back=True), format="json")
    assert created.status_code == 201, created.content
    data = created.json()
    assert data["maintenance_window"] == {**window, "cron": "0 2 * * SAT"}
    assert data["move_back"] is True
    assert data["waiting_for_window"] == ""  # pending: nothing waits yet
    stored = RollingUpdate.objects.get()
    assert stored.maintenance_window == {**window, "cron": "0 2 * * SAT"} and stored.move_back


def test_without_a_window_the_api_says_null_and_move_back_defaults_to_false(operator_api, inventory):
    data = operator_api.post(URL, body(), format="json").json()
    assert data["maintenance_window"] is None and data["move_back"] is False


def test_a_running_rollout_waiting_for_its_window_says_so_in_the_api(operator_api, inventory):
    created = operator_api.post(URL, body(maintenance_window=closed_for_two_hours()), format="json").json()
    RollingUpdate.objects.filter(pk=created["id"]).update(status=RolloutStatus.RUNNING)
    data = operator_api.get(f"{URL}{created['id']}/").json()
    assert data["waiting_for_window"].startswith("waiting for the maintenance window (opens ")
    assert data["waiting_for_window"].endswith(", UTC)")


@pytest.mark.parametrize(("window", "field", "words"), [
    ({"cron": "0 2 * * SAT *"}, "cron", "five cron fields"),
    ({"cron": "0 25 * * *"}, "cron", "not a cron expression"),
    ({"timezone": "Europe/Atlantis"}, "timezone", "Unknown time zone"),
    ({"duration_minutes": 0}, "duration_minutes", "greater than or equal to 1"),
    ({"duration_minutes": -5}, "duration_minutes", "greater than or equal to 1"),
    ({"duration_minutes": 1.5}, "duration_minutes", "whole number"),
])
def test_an_invalid_window_is_a_400_with_a_message_for_its_field(operator_api, inventory, window, field, words):
    good = {"cron": "0 2 * * SAT", "duration_minutes": 240, "timezone": "Europe/Berlin"}
    for url in (URL, URL + "preview/"):
        response = operator_api.post(url, body(maintenance_window={**good, **window}), format="json")
        assert response.status_code == 400, response.content
        errors = response.json()["maintenance_window"]
        assert list(errors) == [field]
        assert words in " ".join(errors[field])
    assert not RollingUpdate.objects.exists()


def test_an_unknown_window_key_is_a_400(operator_api, inventory):
    window = {"cron": "0 2 * * SAT", "duration_minutes": 240, "timezone": "UTC", "tz": "UTC"}
    response = operator_api.post(URL, body(maintenance_window=window), format="json")
    assert response.status_code == 400
    assert "tz" in response.json()["maintenance_window"]


def test_the_preview_shows_the_window_and_when_it_opens(operator_api, inventory):
    window = closed_for_two_hours()
    shown = operator_api.post(URL + "preview/", body(maintenance_window=window, move_back=True), format="json")
    assert shown.status_code == 200, shown.content
    data = shown.json()
    assert data["move_back"] is True
    assert data["maintenance_window"]["open_now"] is False and data["maintenance_window"]["closes_at"] is None
    opens = datetime.fromisoformat(data["maintenance_window"]["next_opens_at"])
    assert timedelta(hours=1, minutes=58) < opens - datetime.now(UTC) <= timedelta(hours=2)
    assert data["feasible"] is True  # a closed window blocks nothing: the rollout waits for it


def test_the_form_carries_the_window_and_puts_its_errors_under_its_fields(inventory):
    form = RolloutForm(data={"name": "ts4", "nodes": ["gpu-a"], "mode": "timeslice", "replicas": 4,
                             "strategy": "rolling", "max_unavailable": 1, "on_failure": "pause",
                             "window_cron": "0 2 * * SAT", "window_duration_minutes": 240,
                             "window_timezone": "Europe/Berlin", "move_back": "on"})
    assert form.is_valid(), form.errors
    assert form.request_values.maintenance_window.as_dict() == {
        "cron": "0 2 * * SAT", "duration_minutes": 240, "timezone": "Europe/Berlin"}
    assert form.request_values.move_back is True
    bad = RolloutForm(data={"name": "ts4", "nodes": ["gpu-a"], "mode": "timeslice", "replicas": 4,
                            "strategy": "rolling", "max_unavailable": 1, "on_failure": "pause",
                            "window_cron": "every night", "window_duration_minutes": 240,
                            "window_timezone": "Moon/Base"})
    assert not bad.is_valid()
    assert "window_cron" in bad.errors and "window_timezone" in bad.errors


def test_the_rollout_page_says_it_waits_for_the_window(client, operator, inventory, operator_api):
    created = operator_api.post(URL, body(maintenance_window=closed_for_two_hours()), format="json").json()
    RollingUpdate.objects.filter(pk=created["id"]).update(status=RolloutStatus.RUNNING)
    client.force_login(operator)
    page = client.get(f"/rollouts/{created['id']}/").content.decode()
    assert "Waiting for the maintenance window (opens " in page
