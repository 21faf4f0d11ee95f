"""The analysis reads each deployment's PodDisruptionBudgets from the cluster (through the backend)
and moves no more of its replicas than the budget allows; no PDB: the setting."""
from __future__ import annotations

import pytest

from consolidation.analysis import analyse, run_analysis
from consolidation.budgets import disruptions_allowed
from consolidation.models import ConsolidationPlan
from nodes.cluster.base import ClusterError, ClusterPDB
from nodes.contract import LABEL_DEPLOYMENT
from scheduler import services
from scheduler.models import Deployment, Placement
from scheduler.services import DeploySpec
from tests.rollouts.simulated import MPS_4, mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture
def spread(settings):
    """Three one-GPU MPS R=4 nodes, one deployment with a quarter-GPU replica on each: two of
    them could move onto the third. The setting alone would allow all of it."""
    settings.CONSOLIDATION_MOVES_PER_DEPLOYMENT = 5
    clock = FakeClock()
    cluster = mps_cluster(clock, node_count=3, deployments=0, start=MPS_4)
    deployment = services.deploy(DeploySpec(name="chat", model="m", memory_gb=8, sharing="mps", share_percent=25,
                                            replicas=3), cluster=cluster)
    clock.advance(3)
    assert len(set(Placement.objects.values_list("node__name", flat=True))) == 3, "the default profile spreads them"
    return cluster, Deployment.objects.get(pk=deployment.pk)


def moved(plan) -> int:
    return sum(1 for move in plan.moves if move["deployment"])


def test_without_a_pdb_the_setting_is_the_budget(spread):
    _, deployment = spread
    plan = analyse()
    assert moved(plan) == 2 and len(plan.nodes_freed) == 2
    assert plan.disruption["budgets"] == [{"deployment": deployment.pk, "workload": "default/chat", "allowed": 5,
                                           "moved": 2, "source": "GPUPLANE_CONSOLIDATION_MOVES_PER_DEPLOYMENT"}]


def test_max_unavailable_zero_keeps_the_workload_out_of_the_plan(spread):
    cluster, deployment = spread
    cluster.add_pdb("default", "chat-pdb", {LABEL_DEPLOYMENT: str(deployment.pk)}, max_unavailable=0)
    outcome = run_analysis()
    assert outcome.plan is None and not ConsolidationPlan.objects.exists()  # nothing to move: no plan stored
    [budget] = outcome.budgets
    assert budget["allowed"] == 0 and budget["moved"] == 0
    assert budget["source"].startswith("PDB default/chat-pdb (maxUnavailable 0, 3 of 3 ready")
    assert any("disruption budget (0)" in s["reason"] for s in outcome.skipped)


def test_min_available_two_of_three_allows_one_move(spread):
    cluster, deployment = spread
    cluster.add_pdb("default", "chat-pdb", {LABEL_DEPLOYMENT: str(deployment.pk)}, min_available=2)
    plan = analyse()
    assert moved(plan) == 1 and len(plan.nodes_freed) == 1
    [budget] = plan.disruption["budgets"]
    assert (budget["allowed"], budget["moved"]) == (1, 1)
    assert "minAvailable 2, 3 of 3 ready: 1 may move" in budget["source"]


def test_a_pdb_of_another_namespace_or_selector_does_not_apply(spread):
    cluster, deployment = spread
    cluster.add_pdb("other", "chat-pdb", {LABEL_DEPLOYMENT: str(deployment.pk)}, max_unavailable=0)
    cluster.add_pdb("default", "else-pdb", {LABEL_DEPLOYMENT: "999"}, max_unavailable=0)
    assert moved(analyse()) == 2


def test_unreadable_pdbs_move_nothing(spread):
    cluster, _ = spread
    cluster.inject_fault("list_pdbs", "the API server is down")
    outcome = run_analysis()
    assert outcome.plan is None
    assert "could not be read" in outcome.budgets[0]["source"]


@pytest.mark.parametrize(("min_available", "max_unavailable", "selected", "ready", "allowed"), [
    (2, None, 3, 3, 1), (2, None, 3, 2, 0), (3, None, 3, 3, 0), ("50%", None, 3, 3, 1),
    (None, 0, 3, 3, 0), (None, 1, 3, 3, 1), (None, 1, 3, 2, 0), (None, 2, 4, 3, 1), (None, "50%", 3, 3, 2),
])
def test_disruptions_allowed_is_kubernetes_arithmetic(min_available, max_unavailable, selected, ready, allowed):
    pdb = ClusterPDB("ns", "p", {}, min_available=min_available, max_unavailable=max_unavailable)
    assert disruptions_allowed(pdb, selected, ready) == allowed


def test_the_simulator_refuses_a_pdb_with_both_or_neither_budget(spread):
    cluster, _ = spread
    with pytest.raises(ClusterError):
        cluster.add_pdb("default", "bad", {}, min_available=1, max_unavailable=1)
    with pytest.raises(ClusterError):
        cluster.add_pdb("default", "bad", {})
