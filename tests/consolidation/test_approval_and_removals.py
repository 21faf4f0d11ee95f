"""Approving a consolidation plan is refused (409, the reason naming the move) while a move or a
removal of any requester is in flight on one of its replicas or nodes: a scale-down's removal,
a preemption's, another plan's move; and the executor aborts such a plan untouched."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from consolidation.models import ConsolidationPlan
from scheduler.models import Move, Placement
from scheduler.services.moving import request_move, request_removal
from tests.consolidation.ticks import execute_tick
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

URL = "/api/v1/consolidations/"


@pytest.fixture
def planned(admin_user):
    """Three one-GPU MPS nodes, two one-replica deployments on two of them, and the plan that
    empties one of those nodes (proposed)."""
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2)
    client = APIClient()
    client.force_authenticate(admin_user)
    plan = ConsolidationPlan.objects.get(pk=client.post(URL, format="json").json()["id"])
    assert plan.moves
    return clock, cluster, client, plan


def the_plans_replica(plan: ConsolidationPlan) -> Placement:
    return Placement.objects.select_related("node", "deployment").get(pk=int(plan.moves[0]["placement"]))


@pytest.mark.parametrize("requested_by", ["scale-down", "preemption"])
def test_a_removal_in_flight_on_the_plans_replica_refuses_the_approval(planned, requested_by):
    clock, cluster, client, plan = planned
    replica = the_plans_replica(plan)
    removal = request_removal(replica, why="t", requested_by=requested_by, requester=f"{requested_by}:1")

    refused = client.post(f"{URL}{plan.pk}/approve/", format="json")

    assert refused.status_code == 409
    detail = refused.json()["detail"]
    assert f"removal {removal.pk} ({requested_by}:1, planned) of {replica.deployment} off {replica.node.name}" in detail
    assert "in flight on the same replica or nodes" in detail
    plan.refresh_from_db()
    assert plan.status == "proposed"


def test_a_move_in_flight_onto_a_node_the_plan_touches_refuses_it_whoever_asked(planned):
    clock, cluster, client, plan = planned
    other = Placement.objects.select_related("node").exclude(pk=the_plans_replica(plan).pk).filter(
        status__in=("reserved", "binding", "running")).first()
    target = plan.moves[0]["to_node"]
    move = request_move(other, why="t", requested_by="consolidation", requester="consolidationplan:999",
                        to_node=target if target != other.node.name else "")

    refused = client.post(f"{URL}{plan.pk}/approve/", format="json")

    assert refused.status_code == 409 and f"move {move.pk} (consolidationplan:999" in refused.json()["detail"]


def test_an_approved_plan_is_aborted_untouched_when_a_removal_starts_on_its_replica_first(planned):
    clock, cluster, client, plan = planned
    assert client.post(f"{URL}{plan.pk}/approve/", format="json").status_code == 200
    removal = request_removal(the_plans_replica(plan), why="t", requested_by="scale-down", requester="scale-down:1")

    execute_tick(cluster, clock)

    plan.refresh_from_db()
    assert plan.status == "aborted" and f"removal {removal.pk}" in plan.reason
    assert not Move.objects.filter(requester=f"consolidationplan:{plan.pk}").exists()
