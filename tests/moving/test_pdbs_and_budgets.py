"""What holds a move back, said on the move: a PodDisruptionBudget (the eviction's 429), the
cluster-wide budget of nodes disrupted at once, the minimum interval between two operations
disrupting one workload, the do-not-disrupt annotation; and gpuplane's own PDBs."""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from nodes.cluster.base import ClusterPDB
from nodes.contract import LABEL_DEPLOYMENT
from nodes.inventory.sync import sync_inventory
from scheduler import services
from scheduler.models import Deployment, Move, Placement
from scheduler.services import DeploySpec
from scheduler.services.moving import request_move
from scheduler.services.own_pdbs import sync_pdbs
from tests.moving.helpers import ACTIVE, assert_no_leak, run_until_settled, tick
from tests.rollouts.simulated import mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def spread():
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=2)
    return clock, cluster


def replicas() -> list[Placement]:
    return list(Placement.objects.select_related("node", "deployment").filter(status__in=ACTIVE).order_by("pk"))


def free_nodes() -> list[str]:
    busy = {p.node.name for p in replicas()}
    return sorted({"gpu-1", "gpu-2", "gpu-3", "gpu-4"} - busy)


def test_a_pdb_that_allows_no_disruption_holds_the_eviction_and_says_which(spread):
    clock, cluster = spread
    original = replicas()[0]
    deployment = original.deployment
    # minAvailable 100%: every pod it selects, the ready replacement too, must stay.
    cluster.add_pdb(deployment.namespace, "all-of-it", {LABEL_DEPLOYMENT: str(deployment.pk)}, min_available="100%")
    move = request_move(original, why="t", requested_by="user", requester="test:1", to_node=free_nodes()[0])
    for _ in range(6):
        tick(cluster, clock)
    move.refresh_from_db()
    assert move.status == "replacement_ready" and not move.evicted_pod
    assert f"PDB {deployment.namespace}/all-of-it (minAvailable 100%, 2 of 2 ready: 0 may move)" in move.blocked_reason
    assert "429" in move.blocked_reason
    assert AuditEvent.objects.filter(verb="move.blocked", object_id=str(move.pk)).count() == 1  # said once
    original.refresh_from_db()
    assert original.status in ACTIVE
    # The budget is relaxed: the next tick evicts.
    cluster.add_pdb(deployment.namespace, "all-of-it", {LABEL_DEPLOYMENT: str(deployment.pk)}, min_available=1)
    [moved] = run_until_settled(cluster, clock)
    assert moved.status == "done" and moved.blocked_reason == ""
    assert_no_leak()


def test_a_move_blocked_past_its_timeout_rolls_back_with_the_reason(spread):
    clock, cluster = spread
    original = replicas()[0]
    cluster.add_pdb(original.deployment.namespace, "none", {LABEL_DEPLOYMENT: str(original.deployment.pk)},
                    max_unavailable=0)
    request_move(original, why="t", requested_by="user", requester="test:1", to_node=free_nodes()[0], timeout_s=15)
    [moved] = run_until_settled(cluster, clock)
    assert moved.status == "rolled_back" and "maxUnavailable 0" in moved.reason and "429" in moved.reason
    assert moved.replacement.status == "released"
    assert_no_leak()


def test_the_concurrent_budget_spans_every_requester(spread, settings):
    clock, cluster = spread
    settings.DISRUPTION_BUDGET = "1"
    first, second = replicas()
    cluster.pod_ready_delay_s = 10.0
    a = request_move(first, why="t", requested_by="consolidation", requester="consolidationplan:1",
                     to_node=free_nodes()[0])
    b = request_move(second, why="t", requested_by="rollout", requester="rolloutnode:1", to_node=free_nodes()[1])
    tick(cluster, clock)
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.status == "replacement_placed" and b.status == "planned"
    assert "1 node(s) disrupted at once" in b.blocked_reason and first.node.name in b.blocked_reason
    moves = run_until_settled(cluster, clock)
    assert [m.status for m in moves] == ["done", "done"]
    assert moves[0].finished_at <= moves[1].placed_at
    assert_no_leak()


def test_the_budget_is_ten_percent_of_gpu_nodes_at_least_one(spread, settings):
    from scheduler.services.disruption import concurrent_budget
    assert concurrent_budget() == 1  # 10% of 4 nodes, rounded up
    settings.DISRUPTION_BUDGET = "50%"
    assert concurrent_budget() == 2
    settings.DISRUPTION_BUDGET = "0"
    assert concurrent_budget() == 1


def test_one_workload_is_not_disrupted_again_by_another_operation_too_soon(settings):
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=4, deployments=0)
    from scheduler import services
    from scheduler.services import DeploySpec
    services.deploy(DeploySpec(name="two", model="m", memory_gb=8, sharing="mps", share_percent=25, replicas=2),
                    cluster=cluster)
    clock.advance(3)
    first, second = replicas()
    request_move(first, why="t", requested_by="consolidation", requester="consolidationplan:1", to_node="gpu-4")
    run_until_settled(cluster, clock)
    later = request_move(second, why="t", requested_by="rollout", requester="rolloutnode:2", to_node="gpu-3")
    tick(cluster, clock)
    later.refresh_from_db()
    assert later.status == "planned" and "minimum interval is 300 s" in later.blocked_reason
    clock.advance(300)
    moves = run_until_settled(cluster, clock)
    assert moves[-1].status == "done"
    assert_no_leak()


def test_do_not_disrupt_on_the_pod_or_the_node_holds_the_move(spread):
    clock, cluster = spread
    original = replicas()[0]
    cluster.set_node_labels(original.node.name, {"gpuplane.io/do-not-disrupt": "true"})
    move = request_move(original, why="t", requested_by="user", requester="test:1", to_node=free_nodes()[0],
                        timeout_s=10)
    tick(cluster, clock)
    move.refresh_from_db()
    assert move.status == "planned" and "marked gpuplane.io/do-not-disrupt" in move.blocked_reason
    [moved] = run_until_settled(cluster, clock)
    assert moved.status == "rolled_back" and moved.replacement is None
    assert_no_leak()


def test_deployments_with_several_replicas_get_their_own_pdb(spread):
    _, cluster = spread
    one, two = Deployment.objects.order_by("pk")
    Deployment.objects.filter(pk=two.pk).update(replicas=3)
    assert sync_pdbs(cluster) == {"applied": 1, "deleted": 0}
    assert cluster.list_pdbs() == [ClusterPDB(two.namespace, f"gpuplane-deployment-{two.pk}",
                                              {LABEL_DEPLOYMENT: str(two.pk)}, max_unavailable=1)]
    assert sync_pdbs(cluster) == {"applied": 0, "deleted": 0}
    Deployment.objects.filter(pk=two.pk).update(replicas=1)
    assert sync_pdbs(cluster) == {"applied": 0, "deleted": 1}
    assert cluster.list_pdbs() == []
    assert Move.objects.count() == 0


def test_a_deployment_with_a_pdb_of_its_owners_gets_none_of_gpuplanes_and_its_replicas_still_move(spread):
    """The Eviction API refuses every eviction of a pod two budgets select (as the API server
    does): gpuplane's own PDB beside the owner's made each move of that deployment wait forever."""
    clock, cluster = spread
    pair = services.deploy(DeploySpec(name="pair", model="m", memory_gb=8, sharing="mps", share_percent=25,
                                      replicas=2), cluster=cluster, nodes=["gpu-1", "gpu-2"])
    clock.advance(3)
    sync_inventory(cluster)
    ours = f"gpuplane-deployment-{pair.pk}"
    assert sync_pdbs(cluster) == {"applied": 1, "deleted": 0}
    cluster.add_pdb(pair.namespace, "pair-budget", {LABEL_DEPLOYMENT: str(pair.pk)}, min_available=2)

    assert sync_pdbs(cluster) == {"applied": 0, "deleted": 1}  # the owner's budget governs its pods
    assert [pdb.name for pdb in cluster.list_pdbs()] == ["pair-budget"]
    assert sync_pdbs(cluster) == {"applied": 0, "deleted": 0}
    original = Placement.objects.filter(deployment=pair, status__in=ACTIVE).order_by("replica_index").first()
    request_move(original, why="t", requested_by="user", requester="test:1", to_node="gpu-4")
    [move] = run_until_settled(cluster, clock)
    # Replacement first: three ready while the original goes, so minAvailable 2 lets it go.
    assert move.status == "done", (move.status, move.reason, move.blocked_reason)
    assert ours not in {pdb.name for pdb in cluster.list_pdbs()}
    assert_no_leak()
