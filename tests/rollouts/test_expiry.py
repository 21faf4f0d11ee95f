"""Issue 18: a rollout created but not started before its ``start_by`` (GPUPLANE_ROLLOUT_START_DEADLINE_S)
expires and releases its nodes, so another rollout may target them."""
from __future__ import annotations

from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from lifecycle.models import AuditEvent
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import NotAllowed, act
from rollouts.creating import create_rollout, validate_request
from rollouts.models import RollingUpdate
from rollouts.reconciler import reconcile
from tests.rollouts.simulated import MPS_4, mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    return mps_cluster(FakeClock(), node_count=2, deployments=1)


def pending(name: str = "mps4") -> RollingUpdate:
    return create_rollout(validate_request(name, ["gpu-1"], MPS_4.as_dict()))


def test_a_rollout_gets_its_start_deadline_from_the_setting(settings, cluster):
    settings.ROLLOUT_START_DEADLINE_S = 900
    rollout = pending()
    assert rollout.start_by - rollout.created_at == pytest.approx(timedelta(seconds=900), abs=timedelta(seconds=1))


def test_a_tick_past_the_deadline_expires_it_and_another_rollout_may_take_its_nodes(settings, cluster, operator):
    settings.ROLLOUT_START_DEADLINE_S = 60
    rollout = pending()
    api = APIClient()
    api.force_authenticate(operator)
    body = {"name": "again", "nodes": ["gpu-1"], "config": MPS_4.as_dict()}
    refused = api.post("/api/v1/rollouts/", body, format="json")
    assert refused.status_code == 409 and f"gpu-1 is already in active rollout {rollout.pk}" in refused.json()["reasons"]

    assert reconcile(cluster=cluster, now=rollout.start_by - timedelta(seconds=1)) == {}
    assert RollingUpdate.objects.get(pk=rollout.pk).status == RolloutStatus.PENDING
    assert reconcile(cluster=cluster, now=rollout.start_by) == {str(rollout.pk): "expired"}

    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.EXPIRED and rollout.finished_at is not None
    assert rollout.message.startswith("not started before ") and "its nodes are released" in rollout.message
    step = rollout.nodes.get()
    assert (step.state, step.reason) == (NodeState.SKIPPED, "the rollout expired before it was started")
    assert AuditEvent.objects.filter(verb="rollingupdate.expired", object_id=str(rollout.pk)).count() == 1
    assert not any(node.unschedulable for node in cluster.list_nodes())
    assert api.post("/api/v1/rollouts/", body, format="json").status_code == 201


def test_starting_one_past_its_deadline_expires_it_instead(cluster):
    rollout = pending()
    RollingUpdate.objects.filter(pk=rollout.pk).update(start_by=rollout.created_at)

    with pytest.raises(NotAllowed, match="Cannot start: not started before"):
        act(rollout, "start", cluster=cluster)

    assert RollingUpdate.objects.get(pk=rollout.pk).status == RolloutStatus.EXPIRED
    assert not any(node.unschedulable for node in cluster.list_nodes())


def test_a_started_rollout_never_expires(settings, cluster):
    settings.ROLLOUT_START_DEADLINE_S = 60
    rollout = act(pending(), "start", cluster=cluster)
    reconcile(cluster=cluster, now=rollout.start_by + timedelta(hours=1))
    assert RollingUpdate.objects.get(pk=rollout.pk).status != RolloutStatus.EXPIRED
