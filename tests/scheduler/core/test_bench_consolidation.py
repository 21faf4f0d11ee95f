"""bench/consolidation.py on a small synthetic openb-format cluster: the plan is valid move by
move and frees at least the BestFit re-pack's nodes (seconds)."""
from __future__ import annotations

import json

from bench import consolidation as bench
from scheduler.core.consolidation import PlanGPU, PlanNode, plan_consolidation
from tests.scheduler.core.test_consolidation import check_plan
from tests.scheduler.core.test_trace_replay import lists  # noqa: F401 - the fixture


def test_the_plan_on_a_loaded_trace_cluster_is_valid_and_beats_the_repack(lists, capsys):  # noqa: F811
    nodes_path, pods_path = lists
    nodes = [n for n in bench.load_nodes(nodes_path) if n.gpu_count]
    cluster, placed = bench.load_cluster(nodes, bench.load_pods(pods_path), 0.4, "random", 42)
    plan_nodes, workloads = bench.planner_input(nodes, cluster, placed)
    result = plan_consolidation(plan_nodes, workloads)
    full = [PlanNode(p.name, tuple(PlanGPU(g.index, 1000) for g in p.gpus), p.sharing_mode, p.gpu_model,
                     n.cpu_milli, n.memory_mib) for p, n in zip(plan_nodes, nodes, strict=True)]
    check_plan(full, workloads, result, {})
    assert result.nodes_freed
    assert bench.main(["--pods", str(pods_path), "--load", "0.4", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nodes_freed"] == len(result.nodes_freed)
    assert summary["nodes_freed"] >= summary["bestfit_repack_nodes_freed"]
    assert summary["plan_seconds"] < 10
