"""Must-show 4: a PodDisruptionBudget with minAvailable = replicas blocks a consolidation move at
its eviction (the API server's 429): the move waits with the budget named, the original keeps
serving, the plan stays executing; the move goes on once the budget allows it. The Eviction API
is the only way the original goes (the architecture test: tests/architecture/test_only_the_mover_moves.py).
"""
from __future__ import annotations

import pytest

from consolidation.analysis import analyse
from consolidation.approval import approve
from consolidation.models import ConsolidationPlan
from nodes.contract import LABEL_APP_NAME, LABEL_DEPLOYMENT
from scheduler.choices import PlacementStatus
from scheduler.models import Move, Placement
from tests.consolidation.ticks import execute_tick
from tests.moving.helpers import assert_no_leak
from tests.rollouts.simulated import mps_cluster, ready_replicas
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


def approved_plan():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=2)
    plan = analyse()
    assert plan is not None and len(plan.moves) == 1
    approve(plan, actor="test")
    return clock, cluster, plan


def test_a_pdb_with_min_available_equal_to_replicas_blocks_the_move_and_says_so():
    clock, cluster, plan = approved_plan()
    original = Placement.objects.select_related("deployment").get(pk=plan.moves[0]["placement"])
    deployment = original.deployment
    # Made after the plan (the analysis would have left the workload out): it selects the pods of
    # the workload on the node being emptied, as a PDB written for that Deployment object would.
    cluster.add_pdb(deployment.namespace, "keep-it", {LABEL_APP_NAME: original.workload_name},
                    min_available=deployment.replicas)
    evictions = []
    real_evict = cluster.evict_pod
    cluster.evict_pod = lambda ns, name: (evictions.append(name), real_evict(ns, name))[1]
    for _ in range(10):
        execute_tick(cluster, clock)
        clock.advance(1)
        assert ready_replicas(cluster)[deployment.pk] >= deployment.replicas
    plan.refresh_from_db()
    move = Move.objects.get(pk=plan.progress["moves"]["0"]["move"])
    assert plan.status == "executing" and move.status == "replacement_ready"
    assert evictions and len(set(evictions)) == 1, "the eviction was tried (and refused) through the Eviction API"
    assert (f"refused (429) by PDB {deployment.namespace}/keep-it (minAvailable {deployment.replicas}, 1 of 1 ready: "
            "0 may move)") in move.blocked_reason
    assert plan.progress["moves"]["0"]["blocked"] == move.blocked_reason
    original.refresh_from_db()
    assert original.status in (PlacementStatus.BINDING, PlacementStatus.RUNNING)
    # The owner relaxes the budget: the move finishes, the plan is executed.
    cluster.add_pdb(deployment.namespace, "keep-it", {LABEL_APP_NAME: original.workload_name}, min_available=0)
    for _ in range(5):
        execute_tick(cluster, clock)
        clock.advance(1)
    plan.refresh_from_db()
    move.refresh_from_db()
    assert plan.status == "executed" and "1 of 1 move(s) done" in plan.reason
    assert move.status == "done" and move.blocked_reason == ""
    assert_no_leak()


def test_a_pdb_over_every_pod_of_the_deployment_counts_the_ready_replacement():
    # minAvailable = replicas over all the deployment's pods: once the replacement is ready there
    # is one pod more than the budget needs, so the API server allows the eviction, as Kubernetes does.
    clock, cluster, plan = approved_plan()
    original = Placement.objects.select_related("deployment").get(pk=plan.moves[0]["placement"])
    deployment = original.deployment
    cluster.add_pdb(deployment.namespace, "all", {LABEL_DEPLOYMENT: str(deployment.pk)},
                    min_available=deployment.replicas)
    for _ in range(10):
        execute_tick(cluster, clock)
        clock.advance(1)
        assert ready_replicas(cluster)[deployment.pk] >= deployment.replicas
    plan = ConsolidationPlan.objects.get(pk=plan.pk)
    assert plan.status == "executed" and "1 of 1 move(s) done" in plan.reason
    assert_no_leak()
