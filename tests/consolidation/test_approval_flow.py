"""Must-show 4: an admin approves -> executed replacement-first (ready replicas never below
desired on any tick); the cluster changed after approval -> aborted with nothing evicted;
viewers and operators get 403; expired plans cannot be approved (409)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from consolidation.models import ConsolidationPlan
from lifecycle.models import AuditEvent
from scheduler.choices import PlacementStatus
from scheduler.models import Deployment, Placement
from scheduler.services.placing import release_replica
from tests.consolidation.ticks import execute_tick
from tests.rollouts.simulated import mps_cluster, ready_replicas
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

URL = "/api/v1/consolidations/"
ACTIVE = (PlacementStatus.RESERVED, PlacementStatus.BINDING, PlacementStatus.RUNNING)


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def busy_nodes() -> set[str]:
    return set(Placement.objects.filter(status__in=ACTIVE).values_list("node__name", flat=True))


@pytest.fixture
def spread():
    """Three one-GPU MPS (R=2) nodes, two one-replica deployments on two of them: one node can go."""
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2)
    assert len(busy_nodes()) == 2, "the default profile spreads the two deployments"
    return clock, cluster


def proposed(admin_user) -> dict:
    response = client_for(admin_user).post(URL, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "proposed"
    return body


def test_admin_approves_and_the_plan_runs_replacement_first(spread, admin_user):
    clock, cluster = spread
    before = busy_nodes()
    plan = proposed(admin_user)
    assert len(plan["moves"]) == 1 and len(plan["nodes_freed"]) == 1 and plan["gpus_freed"] >= 1
    assert plan["savings_per_hour"]["usd"] > 0 and plan["savings_per_hour"]["kwh"] == pytest.approx(0.7)
    assert plan["method"] and plan["expires_at"]
    move = plan["moves"][0]
    approved = client_for(admin_user).post(f"{URL}{plan['id']}/approve/", format="json")
    assert approved.status_code == 200, approved.content
    assert approved.json()["status"] == "approved"
    desired = {d.pk: d.replicas for d in Deployment.objects.all()}
    statuses = []
    for _ in range(30):
        execute_tick(cluster, clock)
        clock.advance(1)
        served = ready_replicas(cluster)
        assert all(served[pk] >= want for pk, want in desired.items()), f"a replica was dropped: {served}"
        status = ConsolidationPlan.objects.get(pk=plan["id"]).status
        statuses.append(status)
        if status not in ("approved", "executing"):
            break
    stored = ConsolidationPlan.objects.get(pk=plan["id"])
    assert stored.status == "executed", stored.reason
    assert "executing" in statuses and "1 of 1 move(s) done" in stored.reason
    assert busy_nodes() == before - {move["from_node"]}, "the freed node still holds a workload"
    verbs = list(AuditEvent.objects.filter(object_type="consolidation.consolidationplan", object_id=str(stored.pk))
                 .order_by("pk").values_list("verb", flat=True))
    assert verbs.index("consolidationplan.replacement_placed") < verbs.index("consolidationplan.move_done")
    assert verbs[-1] == "consolidationplan.executed" and "consolidationplan.approved" in verbs
    # The original was released only after its replacement was ready.
    done = AuditEvent.objects.get(verb="consolidationplan.move_done")
    assert Placement.objects.get(pk=done.after["original_placement"]).status == PlacementStatus.RELEASED
    assert Placement.objects.get(pk=done.after["new_placement"]).node.name == move["to_node"]


def test_a_cluster_changed_after_approval_aborts_with_no_eviction(spread, admin_user):
    clock, cluster = spread
    plan = proposed(admin_user)
    assert client_for(admin_user).post(f"{URL}{plan['id']}/approve/", format="json").status_code == 200
    # The workload on the target node goes away after approval: the plan relied on it.
    target = plan["moves"][0]["to_node"]
    gone = Placement.objects.select_related("deployment").get(status__in=ACTIVE, node__name=target)
    release_replica(gone.deployment, gone.replica_index, cluster=cluster, reason="test: scaled away")
    pods_before = sorted(p.key for p in cluster.list_gpu_pods())
    active_before = set(Placement.objects.filter(status__in=ACTIVE).values_list("pk", flat=True))
    execute_tick(cluster, clock)
    stored = ConsolidationPlan.objects.get(pk=plan["id"])
    assert stored.status == "aborted"
    assert target in stored.reason and "nothing was evicted" in stored.reason
    assert sorted(p.key for p in cluster.list_gpu_pods()) == pods_before
    assert set(Placement.objects.filter(status__in=ACTIVE).values_list("pk", flat=True)) == active_before
    assert not AuditEvent.objects.filter(verb="consolidationplan.replacement_placed").exists()


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_only_admins_analyse_approve_and_reject(spread, admin_user, role, request):
    user = request.getfixturevalue(role)
    plan = proposed(admin_user)
    client = client_for(user)
    assert client.get(URL).status_code == 200  # reading is for every role
    assert client.post(URL, format="json").status_code == 403
    assert client.post(f"{URL}{plan['id']}/approve/", format="json").status_code == 403
    assert client.post(f"{URL}{plan['id']}/reject/", {"reason": "no"}, format="json").status_code == 403
    assert ConsolidationPlan.objects.get(pk=plan["id"]).status == "proposed"


def test_an_expired_plan_cannot_be_approved(spread, admin_user):
    plan = proposed(admin_user)
    ConsolidationPlan.objects.filter(pk=plan["id"]).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client_for(admin_user).post(f"{URL}{plan['id']}/approve/", format="json")
    assert response.status_code == 409
    assert "expired" in response.json()["detail"]
    assert ConsolidationPlan.objects.get(pk=plan["id"]).status == "expired"
    assert AuditEvent.objects.filter(verb="consolidationplan.expired", object_id=str(plan["id"])).exists()


def test_reject_needs_a_reason_and_a_decided_plan_is_a_409(spread, admin_user):
    plan = proposed(admin_user)
    admin = client_for(admin_user)
    assert admin.post(f"{URL}{plan['id']}/reject/", {"reason": "  "}, format="json").status_code == 400
    assert admin.post(f"{URL}{plan['id']}/reject/", format="json").status_code == 400
    rejected = admin.post(f"{URL}{plan['id']}/reject/", {"reason": "peak hours"}, format="json")
    assert rejected.status_code == 200 and rejected.json()["status"] == "rejected"
    assert "peak hours" in rejected.json()["reason"]
    again = admin.post(f"{URL}{plan['id']}/approve/", format="json")
    assert again.status_code == 409 and "rejected" in again.json()["detail"]
    assert admin.post(f"{URL}{plan['id']}/approve/", {"x": 1}, format="json").status_code == 400


def test_an_analysis_with_nothing_to_move_stores_no_plan_and_an_empty_plan_cannot_be_approved(admin_user):
    response = client_for(admin_user).post(URL, format="json")  # an empty cluster: nothing to move
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["plan"] is None and body["detail"].startswith("Nothing to consolidate now")
    assert body["method"] and not ConsolidationPlan.objects.exists()

    # A plan without moves stored before issue 18 (every analysis stored one) is still no proposal.
    empty = ConsolidationPlan.objects.create(expires_at=timezone.now() + timedelta(minutes=5))
    response = client_for(admin_user).post(f"{URL}{empty.pk}/approve/", format="json")

    assert response.status_code == 409
    assert "no moves" in response.json()["detail"]
    assert ConsolidationPlan.objects.get(pk=empty.pk).status == "proposed"
