"""Issue 9, must-show 1: rolling updates across 8 simulated nodes, max unavailable 1, that never leave a
workload unserved: MPS R=2 -> R=4, a MIG layout change, exclusive -> time-slicing.

Each runs the real rollout (created and started as the API does, driven by ``reconcile()`` tick by
tick) on a simulated cluster with its real delays (see ``tests.rollouts.acceptance``). A checker
samples every tick: every deployment keeps its desired ready replicas, no node is cordoned outside
its own turn, and no node is called done before it shows the new config. At the end every node
proves the config by its GFD labels and allocatable, and both the audit log and the simulator's
event record show that workload pods left through evictions only.
"""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from nodes.demo import A100_PRODUCT, H100_PRODUCT
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.sharing.node_config import NodeConfig
from nodes.vocabulary import SharingMode
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import act
from rollouts.creating import create_rollout, validate_request
from scheduler.choices import PlacementStatus
from scheduler.models import Placement
from tests.rollouts.acceptance import NODES, REPLICAS, Checker, Scenario, build, proves, run
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db

SCENARIOS = {
    "mps-2-to-4": Scenario(
        H100_PRODUCT, 1, NodeConfig.of(SharingMode.MPS, 2), NodeConfig.of(SharingMode.MPS, 4),
        {"memory_gb": 8, "sharing": "mps", "share_percent": 25},
    ),
    # A100-40GB: seven 1g.5gb instances -> two 2g.10gb and three 1g.5gb (all seven compute slices).
    "mig-all-1g-to-mixed": Scenario(
        A100_PRODUCT, 1, NodeConfig.of(SharingMode.MIG, None, {"1g.5gb": 7}),
        NodeConfig.of(SharingMode.MIG, None, {"2g.10gb": 2, "1g.5gb": 3}),
        {"memory_gb": 4, "sharing": "mig"},
    ),
    "exclusive-to-timeslice-4": Scenario(
        H100_PRODUCT, 2, NodeConfig.of(SharingMode.EXCLUSIVE), NodeConfig.of(SharingMode.TIMESLICE, 4),
        {"memory_gb": 8, "sharing": "auto"},
    ),
}


@pytest.mark.parametrize("scenario", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_a_rolling_update_across_eight_nodes_never_leaves_a_workload_unserved(scenario):
    clock = FakeClock()
    cluster = build(clock, scenario)
    request = validate_request("must-show-1", list(NODES), scenario.target.as_dict(), max_unavailable=1)
    rollout = act(create_rollout(request), "start", actor="operator", cluster=cluster)
    checker = Checker(cluster, rollout, scenario.target)

    rollout = run(cluster, clock, rollout, checker)

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert rollout.progress_percent == 100.0
    assert {step.state for step in rollout.nodes.all()} == {NodeState.SUCCEEDED}
    # The checker ran through every step of every node, and no deployment ever lost a ready replica.
    assert checker.ticks > 8 * 5
    assert checker.lowest_ready == {f"svc-{n}": REPLICAS for n in range(1, 9)}

    # Every node proves the new config by its GFD labels and allocatable, and is schedulable again.
    nodes = {node.name: node for node in cluster.list_nodes()}
    for name in NODES:
        assert proves(nodes[name], scenario.target) == [], name
        assert not nodes[name].unschedulable
    assert all(applied_config(row) == scenario.target for row in Node.objects.filter(name__in=NODES))

    # Max unavailable 1: the nodes' turns follow one another, each cordoned only within its own turn.
    turns = sorted((ticks[0], ticks[-1], name) for name, ticks in checker.turns.items())
    assert [name for _, _, name in turns] == list(NODES)
    assert all(end < start for (_, end, _), (start, _, _) in zip(turns, turns[1:], strict=False))
    for name, ticks in checker.cordoned_at.items():
        assert set(ticks) <= set(checker.turns[name]), name

    # Evictions only: the audit log has no pod delete, and every workload pod the simulator saw
    # leave while Ready was evicted (what else left was a never-ready replacement the ReplicaSet made
    # on the cordoned node, removed with its released workload).
    verbs = set(AuditEvent.objects.values_list("verb", flat=True))
    assert [verb for verb in verbs if "pod" in verb] == ["rolloutnode.pod_evicted"]
    evicted_in_audit = AuditEvent.objects.filter(verb="rolloutnode.pod_evicted").count()
    removals = checker.removals()
    assert not [e for e in removals if e["reason"] == "Deleted"], "a workload pod was deleted directly"
    assert not [e for e in removals if e["ready"] and e["reason"] != "Evicted"], "a serving pod was killed"
    evictions = [e for e in removals if e["reason"] == "Evicted"]
    # Every replica on a node was evicted in its turn: the 16 originals, and any copy pre-warmed onto
    # a node whose turn came later.
    assert len(evictions) == evicted_in_audit >= 8 * REPLICAS
    assert Placement.objects.filter(node__name__in=NODES, status=PlacementStatus.RELEASED).count() == len(evictions)
