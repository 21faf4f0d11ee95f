"""`gpuplane explain`'s rendering of a stored decision matrix (gpuplane_cli.matrix), on a matrix
shaped like the placement core's ``ScheduleResult.to_dict()``."""
from __future__ import annotations

import re

from gpuplane_cli.matrix import by_weight, render_decision, render_decisions, scores_table, why_not


def score(plugin: str, normalized: int, weight: float, raw: int | None = None) -> dict:
    return {"plugin": plugin, "raw": normalized if raw is None else raw, "normalized": normalized, "weight": weight,
            "weighted": round(normalized * weight, 1)}


# Weights: Fit 0.5, Power 0.3, Spread 0.3 (Power before Spread: equal weights go by name).
WEIGHTS = {"Spread": 0.3, "Fit": 0.5, "Power": 0.3}
ROWS = [
    # gpu-a: 100*0.5 + 80*0.3 + 50*0.3 = 50 + 24 + 15 = 89.0
    {"node": "gpu-a", "feasible": True, "rank": 1, "total": 89.0, "reason": "", "detail": "",
     "scores": [score("Fit", 100, 0.5), score("Power", 80, 0.3, raw=1412), score("Spread", 50, 0.3)],
     "facts": {"gpu_model": "H100-SXM5-80GB", "sharing_mode": "mps", "replicas": 4}},
    # gpu-b: 60*0.5 + 100*0.3 + 50*0.3 = 30 + 30 + 15 = 75.0: 14 below gpu-a, behind on Fit by 20, ahead on Power
    {"node": "gpu-b", "feasible": True, "rank": 2, "total": 75.0, "reason": "", "detail": "",
     "scores": [score("Fit", 60, 0.5), score("Power", 100, 0.3), score("Spread", 50, 0.3)],
     "facts": {"gpu_model": "A100-SXM4-40GB", "sharing_mode": "exclusive", "replicas": 1}},
    # gpu-c: 100*0.5 + 80*0.3 + 50*0.3 = 89.0, tied with gpu-a, ranked after it
    {"node": "gpu-c", "feasible": True, "rank": 3, "total": 89.0, "reason": "", "detail": "",
     "scores": [score("Fit", 100, 0.5), score("Power", 80, 0.3), score("Spread", 50, 0.3)], "facts": {}},
    {"node": "gpu-d", "feasible": False, "rank": None, "total": None, "reason": "insufficient GPU memory",
     "detail": "largest free 10 GB", "scores": [], "facts": {"gpu_model": "A100-SXM4-40GB", "sharing_mode": "mig"}},
]
MATRIX = {
    "outcome": "placed", "node": "gpu-a", "profile": "balanced", "weights": WEIGHTS, "rows": ROWS,
    "message": "placed on gpu-a GPU 0 (mps 25%); 3/8 nodes are available",
    "sizing": "MPS: 25 % as requested", "classification": {"reason": "8 GB is medium"},
    # 8 nodes: 3 feasible kept + 1 more feasible not kept; 4 rejected, 1 of them kept as an example.
    "diagnosis": {"total_nodes": 8, "available": 4, "rejected": {"insufficient GPU memory": 2, "node is cordoned": 2}},
    "feasible_nodes": 4,
}
DECISION = {"replica_index": 0, "outcome": "placed", "node": "gpu-a", "profile": "balanced", "duration_ms": 3.25,
            "message": MATRIX["message"], "created_at": "2026-11-27T07:00:00Z", "matrix": MATRIX}


def test_it_orders_plugins_by_weight_then_name():
    assert by_weight(WEIGHTS) == [("Fit", 0.5), ("Power", 0.3), ("Spread", 0.3)]


def test_the_scores_table_has_the_chosen_node_first_and_a_total_line():
    lines = scores_table(MATRIX, top=5).splitlines()
    assert lines[0].split() == ["PLUGIN", "WEIGHT", "gpu-a", "gpu-b", "gpu-c"]  # node names keep their case
    assert [line.split() for line in lines[1:]] == [
        ["Fit", "0.50", "50.0", "30.0", "50.0"],
        ["Power", "0.30", "24.0", "30.0", "24.0"],
        ["Spread", "0.30", "15.0", "15.0", "15.0"],
        ["TOTAL", "-", "89.0", "75.0", "89.0"],
    ]
    # --top 2: the chosen node and the best other; -o wide: normalized and raw beside the points
    wide = scores_table(MATRIX, top=2, wide=True).splitlines()
    assert wide[0].split() == ["PLUGIN", "WEIGHT", "gpu-a", "gpu-b"]
    assert "24.0 (80/100, raw 1412)" in wide[2] and "30.0 (100/100, raw 100)" in wide[2]


def test_why_not_says_how_far_behind_on_which_plugin_and_counts_what_the_matrix_left_out():
    assert why_not(MATRIX) == [
        "gpu-b: 14.0 points below gpu-a (Fit -20.0)",  # Power is +6.0 for gpu-b: not a reason it lost
        "gpu-c: tied with gpu-a at 89.0 points; ranked after it",
        "gpu-d: rejected, insufficient GPU memory (largest free 10 GB)",
        # diagnosis 2 + 2 rejected, gpu-d shown: 1 memory and 2 cordoned left
        "3 more nodes rejected: node is cordoned (2), insufficient GPU memory (1)",
        "1 more feasible node scored lower (not kept)",  # feasible_nodes 4 - 3 kept
    ]


def test_a_decision_reads_outcome_sizing_nodes_scores_and_reasons():
    text = render_decision(DECISION, top=5)
    assert text.startswith("Replica 0: placed on gpu-a\n")
    assert re.search(r"^  Sizing:\s+MPS: 25 % as requested$", text, re.M)
    assert re.search(r"^  Nodes:\s+4 of 8 available$", text, re.M)
    assert re.search(r"^  Decided:\s+2026-11-27T07:00:00Z in 3.2 ms$", text, re.M)
    assert re.search(r"^  1\s+gpu-a\s+H100-SXM5-80GB\s+mps x4\s+chosen\s+89.0\s+<none>$", text, re.M)
    assert re.search(r"^  2\s+gpu-b\s+A100-SXM4-40GB\s+exclusive\s+feasible\s+75.0\s", text, re.M)
    assert re.search(r"^  -\s+gpu-d\s+A100-SXM4-40GB\s+mig\s+rejected\s+-\s+insufficient GPU memory - largest free",
                     text, re.M)
    assert "\nWhy not the others:\n  gpu-b: 14.0 points below gpu-a" in text
    assert "the top 2 of 3 feasible nodes (--top N for more)" in render_decision(DECISION, top=2)


def test_an_unplaced_replica_says_why_not_placed_and_the_suggestion():
    matrix = {**MATRIX, "outcome": "unschedulable", "node": None,
              "rows": [ROWS[3]], "feasible_nodes": 0,
              "diagnosis": {"total_nodes": 8, "available": 0, "rejected": {"insufficient GPU memory": 8}},
              "explanation": {"suggestion": {"text": "ask for 2 GPUs per replica", "changes": {"gpu_count": 2}}}}
    text = render_decision({**DECISION, "outcome": "unschedulable", "node": None, "matrix": matrix})
    assert text.startswith("Replica 0: unschedulable\n")
    assert "Scores" not in text  # nothing feasible, nothing scored
    assert text.endswith("Why not placed:\n  gpu-d: rejected, insufficient GPU memory (largest free 10 GB)\n"
                         "  7 more nodes rejected: insufficient GPU memory (7)\n\nSuggestion: ask for 2 GPUs per replica")


def test_every_replica_gets_its_section_or_only_the_one_asked_for():
    deployment = {"id": 7, "name": "chat", "namespace": "team-a", "status": "running"}
    answer = {"deployment": 7, "status": "running",
              "decisions": [DECISION, {**DECISION, "replica_index": 1, "node": "gpu-b", "matrix": {**MATRIX, "node": "gpu-b"}}]}
    text = render_decisions(deployment, answer)
    assert text.startswith("Deployment team-a/chat (id 7): running\n\nReplica 0: placed on gpu-a")
    assert "\n\nReplica 1: placed on gpu-b\n" in text
    only = render_decisions(deployment, answer, replica=1)
    assert "Replica 0" not in only and "Replica 1: placed on gpu-b" in only
    assert render_decisions(deployment, answer, replica=5).endswith("No decision stored for replica 5.")
