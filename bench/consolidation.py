"""Consolidation planner on the trace cluster loaded to 60 % (issue 10, must-show 3).

    python bench/consolidation.py --pods ../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv --json

Loads the 1,213 trace nodes (``bench/trace_replay.py``) with the trace workload (its order for
the seed) until 60 % of GPU milli is allocated, placing each pod with ``--load-policy`` (random
by default: a spread-out cluster, what consolidation has to repair), then times
``scheduler.core.consolidation.plan_consolidation`` on it. The baseline is BestFit re-packing
every placed pod from scratch onto empty nodes (largest first, or in arrival order when that
fits more; the same filter and BestFit score as the replay): nodes freed = nodes in use now - nodes the re-pack uses. The planner must free at
least as many, in under 10 s.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.trace_replay import NODE_LIST, load_nodes, load_pods, workload  # noqa: E402
from scheduler.core.consolidation import PlanGPU, PlanNode, PlanWorkload, plan_consolidation  # noqa: E402
from scheduler.core.fragmentation import ClassTable, typical_pods  # noqa: E402
from scheduler.core.packing import PackingCluster, PackNode, PackPod  # noqa: E402
from scheduler.core.packing_policies import choose  # noqa: E402

MODE = "mps-weighted"  # trace GPUs take any share (as trace_profiles expresses them)


def load_cluster(nodes: list[PackNode], pods: list[PackPod], load: float, policy: str, seed: int
                 ) -> tuple[PackingCluster, list[tuple[int, PackPod, list[int]]]]:
    rng = np.random.default_rng(seed)
    cluster = PackingCluster(nodes)
    cluster.track(ClassTable.build(
        typical_pods((p.cpu_milli, p.gpu_milli, p.gpu_count, p.gpu_models) for p in pods), list(cluster.models)))
    placed: list[tuple[int, PackPod, list[int]]] = []
    allocated = 0
    for pod in workload(pods, cluster.gpu_capacity_milli, rng):
        if allocated >= load * cluster.gpu_capacity_milli:
            break
        choice = choose(policy, cluster, pod, rng=rng)
        if choice is None:
            continue
        cluster.place(choice.row, pod, choice.gpus)
        placed.append((choice.row, pod, choice.gpus))
        allocated += pod.total_gpu_milli
    return cluster, placed


def planner_input(nodes: list[PackNode], cluster: PackingCluster, placed: list[tuple[int, PackPod, list[int]]]
                  ) -> tuple[list[PlanNode], list[PlanWorkload]]:
    plan_nodes = [PlanNode(n.name, tuple(PlanGPU(g, int(cluster.gpu_left[i, g])) for g in range(n.gpu_count)), MODE,
                           n.gpu_model, int(cluster.cpu_left[i]), int(cluster.mem_left[i]))
                  for i, n in enumerate(nodes)]
    workloads = [PlanWorkload(f"pod-{k}", f"pod-{k}", nodes[row].name, tuple(gpus), pod.gpu_milli, MODE,
                              cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, gpu_models=pod.gpu_models)
                 for k, (row, pod, gpus) in enumerate(placed)]
    return plan_nodes, workloads


def bestfit_repack_nodes(nodes: list[PackNode], placed: list[tuple[int, PackPod, list[int]]]) -> int | None:
    """Fewest nodes BestFit needs for every placed pod, re-packed from scratch, largest first or
    in the order they arrived; None if neither order places every pod."""
    orders = [sorted(placed, key=lambda p: (-p[1].total_gpu_milli, -p[1].cpu_milli)), placed]
    full_cpu = np.array([n.cpu_milli for n in nodes])
    used: list[int] = []
    for order in orders:
        cluster = PackingCluster(nodes)
        for _, pod, _ in order:
            choice = choose("bestfit", cluster, pod)
            if choice is None:
                break
            cluster.place(choice.row, pod, choice.gpus)
        else:
            used.append(int(((cluster.cpu_left < full_cpu)
                             | (cluster.gpu_left.sum(axis=1) < cluster.gpu_count * 1000)).sum()))
    return min(used) if used else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=Path, required=True)
    parser.add_argument("--nodes", type=Path, default=None)
    parser.add_argument("--load", type=float, default=0.6)
    parser.add_argument("--load-policy", default="random")
    parser.add_argument("--policy", default="bestfit", help="the planner's packing policy")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    nodes = [n for n in load_nodes(args.nodes or args.pods.parent / NODE_LIST) if n.gpu_count]
    pods = load_pods(args.pods)
    cluster, placed = load_cluster(nodes, pods, args.load, args.load_policy, args.seed)
    plan_nodes, workloads = planner_input(nodes, cluster, placed)
    in_use = len({w.node for w in workloads})
    start = time.perf_counter()
    result = plan_consolidation(plan_nodes, workloads, policy=args.policy)
    seconds = time.perf_counter() - start
    repacked = bestfit_repack_nodes(nodes, placed)
    summary = {
        "nodes": len(nodes), "gpus": int(cluster.gpu_count.sum()), "pods": len(workloads),
        "load_policy": args.load_policy, "allocated_pct": round(100 * sum(w.used_milli for w in workloads)
                                                               / cluster.gpu_capacity_milli, 2),
        "nodes_in_use": in_use, "plan_seconds": round(seconds, 3), "nodes_freed": len(result.nodes_freed),
        "gpus_freed": len(result.gpus_freed), "moves": result.workloads_moved,
        "bestfit_repack_nodes_freed": None if repacked is None else in_use - repacked,
        "method": result.method,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
