"""`POST /api/v1/rollouts/{id}/start|pause|resume|abort/`: roles, the moves, 409 with the reason."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from nodes.models import Node
from rollouts.models import RollingUpdate
from tests.rollouts.cluster import nodes, replica

pytestmark = pytest.mark.django_db

URL = "/api/v1/rollouts/"


@pytest.fixture
def operator_api(operator) -> APIClient:
    client = APIClient()
    client.force_authenticate(operator)
    return client


@pytest.fixture
def rollout_id(operator_api) -> int:
    a, _b, _c = nodes("gpu-a", "gpu-b", "gpu-c")
    replica(a, "chat")
    created = operator_api.post(URL, {"name": "ts4", "nodes": ["gpu-a", "gpu-b"],
                                      "config": {"mode": "timeslice", "replicas": 4}}, format="json")
    assert created.status_code == 201, created.content
    return created.json()["id"]


def post(client, rollout_id, action):
    return client.post(f"{URL}{rollout_id}/{action}/", format="json")


def test_an_operator_starts_pauses_resumes_and_aborts(operator_api, rollout_id):
    for action, status in [("start", "running"), ("pause", "paused"), ("resume", "running"), ("abort", "aborted")]:
        response = post(operator_api, rollout_id, action)
        assert response.status_code == 200, response.content
        assert response.json()["status"] == status
        assert RollingUpdate.objects.get(pk=rollout_id).status == status
    verbs = list(AuditEvent.objects.filter(object_type="rollouts.rollingupdate").order_by("pk")
                 .values_list("verb", flat=True))
    assert verbs[-4:] == ["rollingupdate.running", "rollingupdate.paused", "rollingupdate.running",
                          "rollingupdate.aborted"]
    assert RollingUpdate.objects.get(pk=rollout_id).finished_at is not None


@pytest.mark.parametrize(("first", "then", "why"), [
    ([], "pause", "Cannot pause a rollout that is pending: only a running one."),
    ([], "resume", "Cannot resume a rollout that is pending: only a paused one."),
    (["start"], "start", "Cannot start a rollout that is running: only a pending one."),
    (["start", "abort"], "resume", "Cannot resume a rollout that is aborted: only a paused one."),
    (["abort"], "abort", "Cannot abort a rollout that is aborted: only a pending or running or paused one."),
])
def test_an_action_the_status_does_not_allow_is_409_with_the_reason(operator_api, rollout_id, first, then, why):
    for action in first:
        assert post(operator_api, rollout_id, action).status_code == 200
    before = RollingUpdate.objects.get(pk=rollout_id).status
    events = AuditEvent.objects.count()

    response = post(operator_api, rollout_id, then)

    assert response.status_code == 409
    assert response.json()["detail"] == why
    assert RollingUpdate.objects.get(pk=rollout_id).status == before
    assert AuditEvent.objects.count() == events


def test_viewers_may_not_act_and_anonymous_is_401(viewer_api, api, rollout_id):
    for action in ("start", "pause", "resume", "abort"):
        assert post(viewer_api, rollout_id, action).status_code == 403
        assert post(api, rollout_id, action).status_code == 401
    assert RollingUpdate.objects.get(pk=rollout_id).status == "pending"


def test_an_unknown_rollout_is_404(operator_api):
    assert post(operator_api, 999, "start").status_code == 404


def test_start_is_refused_when_the_cluster_filled_up_since_the_rollout_was_created(operator_api, rollout_id):
    # Since creation, two-GPU replicas filled gpu-c and gpu-b: gpu-b's cannot go anywhere now.
    replica(Node.objects.get(name="gpu-c"), "big", gpus=2)
    replica(Node.objects.get(name="gpu-b"), "wide", gpus=2)

    response = post(operator_api, rollout_id, "start")

    assert response.status_code == 409
    detail = response.json()["detail"]
    assert detail.startswith("Not safe to start now: ")
    assert "default/wide on gpu-b cannot move: " in detail  # the placement engine's reason follows
    assert "too few free GPUs for the gang" in detail
    assert RollingUpdate.objects.get(pk=rollout_id).status == "pending"
