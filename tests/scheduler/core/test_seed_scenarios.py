"""The seed scenarios on a hand-built cluster resembling the demo one (see builders.demo_nodes)."""
from __future__ import annotations

import json

from nodes.vocabulary import PartitionKind
from scheduler.core import ClusterSnapshot, Outcome, Priority, QuotaUsage, WorkloadType, scheduler_for
from tests.scheduler.core.builders import GIB, HOSTNAME, demo_nodes, demo_snapshot, occupy, request


def test_scenario_1_large_high_priority_tight_slo_gets_an_exclusive_h100():
    decision = scheduler_for("balanced").schedule(
        request(40, key="prod/llm#0", priority=Priority.HIGH, latency_slo_ms=100), demo_snapshot()
    )
    assert decision.outcome == Outcome.PLACED
    assert decision.node.startswith("h100-")
    assert decision.assignment.kind == PartitionKind.EXCLUSIVE
    assert decision.assignment.partitions[0].share_milli == 1000
    assert decision.classification.latency_override
    # Why: every seed plugin prefers the H100 (e.g. H100 1412 vs A100 780 milli-TFLOPS/W,
    # preferred GPU, HIGH priority wants TFLOPS): 100 on each. FragmentationGradient: a whole H100
    # of two leaves no room for the shipped 2 x 1000 typical pod (raw -100 milli-GPU, squashed
    # 47); SharingPlan has no say for a whole GPU (100 everywhere). The total is the weighted
    # mean: (0.3 + 0.25 + 0.2 + 0.15 + 0.1) x 100 + 3.0 x 47 + 4.5 x 100 = 691, / 8.5 = 81.294.
    chosen = decision.row(decision.node)
    assert chosen.total == 81.294
    weighted_a100 = decision.row("a100-5")
    # A full weighted GPU would do, worse: 55 x 0.3 + 15 x 0.25 + 100 x 0.2 + 31 x 0.15 + 100 x 0.1
    # = 54.9, + 3.0 x 47 (the same -100 milli-GPU) + 4.5 x 100 = 645.9, / 8.5 = 75.988.
    assert weighted_a100.feasible and weighted_a100.total == 75.988
    # Uniform MPS / time-slice slots can never give 100 %.
    assert decision.row("a100-3").reason == "MPS share too small"
    assert decision.row("a100-7").reason == "time-slice share too small"


def test_scenario_2_small_low_priority_batch_gets_a_half_a100_over_mps():
    decision = scheduler_for("balanced").schedule(
        request(8, key="batch/embed#0", priority=Priority.LOW, workload_type=WorkloadType.BATCH), demo_snapshot()
    )
    assert decision.outcome == Outcome.PLACED
    assert decision.node.startswith("a100-")
    assignment = decision.assignment
    assert assignment.kind in (PartitionKind.MPS, PartitionKind.MPS_WEIGHTED)
    assert assignment.partitions[0].share_milli == 500
    assert assignment.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    # A100 beats an idle H100: efficiency 55 x 0.30 + affinity 100 x 0.25 + utilization 100 x 0.20
    # + LOW power 100 x 0.15 + compat 100 x 0.10 = 86.5, + fragmentation 3.0 x 54 (raw +200
    # milli-GPU) + plan 4.5 x 100 = 698.5, / 8.5 = 82.176 vs H100 100 x 0.30 + 15 x 0.25 + 100 x
    # 0.20 + 57 x 0.15 + 50 x 0.10 = 67.3, + 3.0 x 35 (an exclusive H100 taken: raw -600) + 450
    # = 622.3, / 8.5 = 73.212.
    assert decision.row(decision.node).total == 82.176
    assert decision.row("h100-1").total == 73.212


def test_scenario_3_mixed_load_goes_to_the_least_utilized_suitable_a100():
    utilization = {f"a100-{i}": 60.0 + i for i in range(1, 9)}
    utilization["a100-2"] = 45.0  # the least utilized node that can give 50 %
    utilization["a100-4"] = 20.0  # less utilized still, but MPS R=4 cannot give 50 %
    snapshot = demo_snapshot(h100_util=95.0, a100_util=utilization)
    decision = scheduler_for("balanced").schedule(request(8, key="team/chat#0"), snapshot)
    assert decision.node == "a100-2"
    assert decision.diagnosis.rejected["utilization >= 90%"] == 4  # the busy H100s
    assert decision.row("a100-4").reason == "MPS share too small"
    scored = {row.node: row for row in decision.rows if row.feasible}
    # LeastUtilized: floor(100 - 45) = 55 for a100-2 against 100 - 61 = 39 for a100-1.
    least = {name: next(s.raw for s in row.scores if s.plugin == "LeastUtilized") for name, row in scored.items()}
    assert least["a100-2"] == 55 and least["a100-1"] == 39


def test_scenario_4_mps_weighted_and_uniform_limits():
    nodes = demo_nodes()
    weighted = next(node for node in nodes if node.name == "a100-5")
    occupy(weighted, 0, 500, 8 * GIB, "team/half")
    occupy(weighted, 0, 250, 4 * GIB, "team/quarter")
    occupy(weighted, 1, 1000, 16 * GIB, "team/whole")  # GPU 1 is full
    snapshot = ClusterSnapshot(nodes)
    scheduler = scheduler_for("balanced")
    only_a100_5 = {HOSTNAME: "a100-5"}

    first = scheduler.schedule(request(4, key="team/q#0", share_milli=250, node_selector=only_a100_5), snapshot)
    assert first.outcome == Outcome.PLACED
    assert (first.node, first.assignment.gpu_indexes) == ("a100-5", (0,))
    assert first.assignment.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"

    second = scheduler.schedule(request(4, key="team/q#1", share_milli=250, node_selector=only_a100_5,
                                        allow_default_scheduler=False), snapshot)
    assert second.outcome == Outcome.UNSCHEDULABLE
    assert second.message == ("0/12 nodes are available: 11 nodes have labels that do not match the request, "
                              "1 node has insufficient free GPU share")

    # Uniform MPS with R = 4 cannot give 50 %, and says so.
    uniform = scheduler.schedule(request(8, key="team/h#0", node_selector={HOSTNAME: "a100-3"},
                                         allow_default_scheduler=False), snapshot)
    assert uniform.diagnosis.rejected == {"node labels do not match": 11, "MPS share too small": 1}
    assert uniform.row("a100-3").detail == "MPS with R=4 gives each client 25%; a 50% request needs R <= 2"


def test_the_demo_decision_matrix_is_json_with_every_node():
    decision = scheduler_for("balanced").schedule(
        request(8, key="team/app#0", quota=QuotaUsage(gpu_milli_limit=4000)), demo_snapshot()
    )
    data = json.loads(json.dumps(decision.to_dict()))
    assert {row["node"] for row in data["rows"]} == {f"h100-{i}" for i in range(1, 5)} | {f"a100-{i}" for i in range(1, 9)}
    assert data["profile"] == "balanced"
    assert data["weights"] == {"PowerEfficiency": 0.3, "WorkloadAffinity": 0.25, "LeastUtilized": 0.2,
                               "PriorityPower": 0.15, "PartitionCompat": 0.1, "FragmentationGradient": 3.0,
                               "SharingPlan": 4.5}
    assert data["total_scale"] == 100
    top = data["rows"][0]
    assert top["node"] == data["node"] and top["rank"] == 1
    assert [s["plugin"] for s in top["scores"]] == list(data["weights"])
    # A total is the weighted mean of the row's normalized scores: its cells add up to it.
    assert abs(sum(s["weighted"] for s in top["scores"]) - top["total"]) < 0.01 and 0 <= top["total"] <= 100
    assert data["assignment"]["node"] == data["node"]
