"""The framework: normalization and weights, bounded decision matrices, reserve, fallback, profiles."""
from __future__ import annotations

import json

import numpy as np
import pytest

from nodes.vocabulary import SharingMode
from scheduler.core import (
    PROFILES,
    ClusterSnapshot,
    Outcome,
    ProfileError,
    SharingRequest,
    build_profile,
    get_profile,
    scheduler_for,
)
from scheduler.core.cycle import Scheduler
from scheduler.core.framework import (
    SUCCESS,
    Code,
    CycleState,
    Profile,
    ReservePlugin,
    ScorePlugin,
    ScoreRangeError,
    Status,
)
from scheduler.core.plugins import CapacityReserve, GPUMemoryFit, LeastUtilized, NodeSchedulable
from tests.scheduler.core.builders import H100, demo_snapshot, make_node, occupy, request


class Constant(ScorePlugin):
    NAME = "Constant"

    def __init__(self, value: int) -> None:
        self.value = value

    def score(self, state: CycleState, nodes: np.ndarray) -> np.ndarray:
        return np.full(len(nodes), self.value)


def _profile(*scores: tuple[ScorePlugin, float], reserves: tuple = (CapacityReserve(),), top_k: int = 50) -> Profile:
    return Profile(name="test", filters=(NodeSchedulable(), GPUMemoryFit()), scores=scores, reserves=reserves,
                   top_k=top_k)


def test_the_framework_refuses_a_normalized_score_out_of_range():
    snapshot = ClusterSnapshot([make_node("a")])
    with pytest.raises(ScoreRangeError, match="Constant normalized scores must be within 0..100, got 101..101"):
        Scheduler(_profile((Constant(101), 1.0))).schedule(request(), snapshot)
    with pytest.raises(ScoreRangeError):
        Scheduler(_profile((Constant(-1), 1.0))).schedule(request(), snapshot)


def test_weights_are_applied_by_the_framework_and_the_breakdown_is_kept():
    idle, busy = make_node("idle", util=0.0), make_node("busy", util=40.0)
    decision = Scheduler(_profile((LeastUtilized(), 0.75), (Constant(20), 0.25))).schedule(
        request(), ClusterSnapshot([busy, idle])
    )
    assert decision.node == "idle"
    row = decision.row("busy")
    least, constant = row.scores
    # LeastUtilized: 100 - 40 = 60 -> x 0.75 = 45; Constant 20 x 0.25 = 5; total 50.
    assert (least.raw, least.normalized, least.weight, least.weighted) == (60, 60, 0.75, 45.0)
    assert (constant.normalized, constant.weighted) == (20, 5.0)
    assert row.total == 50.0
    assert decision.row("idle").total == 100 * 0.75 + 20 * 0.25


def test_ties_go_to_the_lower_tie_rank():
    snapshot = ClusterSnapshot([make_node(f"n{i}") for i in range(4)])
    scheduler = Scheduler(_profile((Constant(50), 1.0)))
    assert scheduler.schedule(request(key="a#0"), snapshot, reserve=False).node == "n0"
    snapshot.tie_rank = np.array([3, 2, 0, 1])  # e.g. a random order drawn once per replay seed
    assert scheduler.schedule(request(key="a#1"), snapshot, reserve=False).node == "n2"


def test_a_large_cluster_keeps_only_the_top_k_and_counts_the_rest():
    nodes = [make_node(f"node-{i:03d}", util=float(i % 80)) for i in range(120)]
    for node in nodes[:30]:
        node.cordoned = True
    for node in nodes[30:50]:
        node.ready = False
    snapshot = ClusterSnapshot(nodes)
    profile = build_profile({**PROFILES["balanced"], "top_k": 10, "rejected_examples_per_reason": 2})
    decision = Scheduler(profile).schedule(request(), snapshot)
    assert decision.diagnosis.rejected == {"cordoned": 30, "node not ready": 20}
    assert decision.diagnosis.available == 70
    assert len(decision.scored_rows) == 10
    assert [row.rank for row in decision.scored_rows] == list(range(1, 11))
    totals = [row.total for row in decision.scored_rows]
    assert totals == sorted(totals, reverse=True)
    assert len(decision.rejected_rows) == 4  # 2 examples for each of the 2 reasons
    assert decision.to_dict()["feasible_nodes"] == 70
    # The chosen node is the least utilized feasible one (utilization i % 80, nodes 50..119).
    assert decision.node == "node-080"


def test_a_small_cluster_keeps_a_row_for_every_node():
    decision = scheduler_for("balanced").schedule(request(), demo_snapshot())
    assert len(decision.rows) == 12
    assert sum(1 for row in decision.rows if row.feasible) == decision.diagnosis.available


def test_reserve_applies_the_assignment_unless_told_not_to():
    snapshot = ClusterSnapshot([make_node("h100", H100, gpus=1)])
    scheduler = scheduler_for("balanced")
    dry = scheduler.schedule(request(40, key="a#0"), snapshot, reserve=False)
    assert dry.outcome == Outcome.PLACED and snapshot.whole_free[0] == 1
    placed = scheduler.schedule(request(40, key="a#1"), snapshot)
    assert placed.outcome == Outcome.PLACED and snapshot.whole_free[0] == 0
    assert snapshot.nodes[0].gpus[0].partitions[0].occupant == "a#1"
    again = scheduler.schedule(request(40, key="a#2", allow_default_scheduler=False), snapshot)
    assert again.outcome == Outcome.UNSCHEDULABLE
    assert again.message == "0/1 nodes are available: 1 node has no free GPU or partition"


class RefuseNode(ReservePlugin):
    """Fails reservations on one node, recording calls (another writer took the capacity)."""

    NAME = "RefuseNode"

    def __init__(self, node: str) -> None:
        self.node = node
        self.calls: list[str] = []

    def reserve(self, state: CycleState, assignment) -> Status:  # type: ignore[no-untyped-def]
        self.calls.append(f"reserve {assignment.node}")
        if assignment.node == self.node:
            return Status(Code.UNSCHEDULABLE, "taken", plugin=self.NAME)
        return SUCCESS

    def unreserve(self, state: CycleState, assignment) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(f"unreserve {assignment.node}")


def test_a_failed_reserve_is_undone_and_the_next_best_node_is_tried():
    snapshot = ClusterSnapshot([make_node("best", util=0.0), make_node("second", util=50.0)])
    refuse = RefuseNode("best")
    decision = Scheduler(_profile((LeastUtilized(), 1.0), reserves=(CapacityReserve(), refuse))).schedule(
        request(key="x#0"), snapshot
    )
    assert decision.node == "second"
    assert decision.attempts == 1
    assert refuse.calls == ["reserve best", "reserve second"]
    # CapacityReserve's claim on "best" was rolled back.
    assert all(not gpu.partitions for gpu in snapshot.nodes[0].gpus)
    assert snapshot.nodes[1].gpus[0].partitions[0].occupant == "x#0"


def test_a_prefilter_rejection_counts_every_node():
    decision = scheduler_for("balanced").schedule(
        request(80, gpu_count=2, sharing=SharingRequest.TIMESLICE, allow_default_scheduler=False), demo_snapshot()
    )
    assert decision.outcome == Outcome.UNSCHEDULABLE
    assert decision.message.startswith(
        "0/12 nodes are available: 12 nodes are ruled out: timeslice requests take exactly one GPU")


def test_when_nothing_fits_it_hands_over_to_the_default_scheduler_if_allowed():
    snapshot = demo_snapshot()
    decision = scheduler_for("balanced").schedule(request(500), snapshot)  # 500 GiB fits no GPU
    assert decision.outcome == Outcome.DEFAULT_SCHEDULER
    assert decision.node is None and decision.assignment is None
    assert "handed over to the default Kubernetes scheduler (no node affinity)" in decision.message
    refused = scheduler_for("balanced").schedule(request(500, allow_default_scheduler=False), snapshot)
    assert refused.outcome == Outcome.UNSCHEDULABLE
    assert "default" not in refused.message


def test_gpu_selection_can_be_switched_off():
    decision = scheduler_for("balanced").schedule(request(8, enable_gpu_selection=False), demo_snapshot())
    assert decision.outcome == Outcome.DEFAULT_SCHEDULER
    assert decision.node is None
    assert decision.message.startswith("GPU selection is disabled")
    assert decision.to_dict()["rows"] == []


def test_idle_gpus_follow_the_fallback_rule():
    quiet = make_node("quiet", util=29.0, memory_used_pct=49.0)  # both below: 2 idle
    warm = make_node("warm", util=30.0, memory_used_pct=10.0)  # 30 % is not < 30 %
    full_memory = make_node("full-memory", util=5.0, memory_used_pct=60.0)
    no_metrics = make_node("no-metrics", mode=SharingMode.MPS_WEIGHTED, replicas=4)  # counts if unallocated
    occupy(no_metrics, 1, 250, 1024, "team/a")  # GPU 1 holds a share: not idle
    cordoned = make_node("cordoned", util=0.0, memory_used_pct=0.0, cordoned=True)  # not schedulable
    snapshot = ClusterSnapshot([quiet, warm, full_memory, no_metrics, cordoned])
    assert scheduler_for("balanced").idle_gpus(snapshot) == 2 + 1
    custom = build_profile({**PROFILES["balanced"], "fallback": {"idle_utilization_pct": 31, "idle_memory_pct": 50}})
    assert Scheduler(custom).idle_gpus(snapshot) == 2 + 2 + 1


def test_profiles_are_data():
    balanced = get_profile("balanced")
    # The seed's weights, plus the packing rule (issue 20).
    assert balanced.weights == {"PowerEfficiency": 0.3, "WorkloadAffinity": 0.25, "LeastUtilized": 0.2,
                                "PriorityPower": 0.15, "PartitionCompat": 0.1, "FragmentationGradient": 3.0,
                                "SharingPlan": 4.5}
    assert [p.NAME for p in balanced.filters] == list(PROFILES["balanced"]["filters"])
    assert [p.NAME for p in balanced.pre_scores] == ["SharingPlan"]
    packing = get_profile("packing")
    assert set(packing.weights) == {"SharingPlan", "FragmentationGradient", "PartitionCompat"}
    custom = get_profile("dense", {"dense": {"scores": {"BestFit": 1}, "plugin_args": {"UtilizationLimit": {"max_pct": 80}},
                                             "filters": ["NodeSchedulable", "UtilizationLimit", "GPUMemoryFit"]}})
    assert custom.name == "dense" and custom.filters[1].reasons == ("utilization >= 80%",)
    json.dumps(PROFILES)  # plain data, storable in settings


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scores": {"NoSuchPlugin": 1}}, "unknown plugin 'NoSuchPlugin'"),
        ({"scores": {"NodeSchedulable": 1}}, "cannot be used as a score plugin"),
        ({"filters": ["LeastUtilized"]}, "cannot be used as a filter plugin"),
        ({"scores": {"BestFit": -0.5}}, "must be a finite number >= 0"),
        ({"scores": {"BestFit": 1}, "plugin_args": {"FragmentationGradient": {}}}, "not enabled: FragmentationGradient"),
        ({"plugin_args": {"UtilizationLimit": {"bogus": 1}}}, "bad arguments for UtilizationLimit"),
        ({"top_k": 0}, "top_k must be >= 1"),
        ({"wights": {}}, "unknown profile keys: wights"),
    ],
)
def test_bad_profiles_are_refused_with_a_reason(data, message):
    with pytest.raises(ProfileError, match=message):
        build_profile(data)
    with pytest.raises(ProfileError, match="unknown profile 'nope'"):
        get_profile("nope")
