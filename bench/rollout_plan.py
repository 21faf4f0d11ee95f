"""Rolling-update planner benchmark: time to plan changing a whole fleet's sharing config.

    python bench/rollout_plan.py                        # table for 100 / 1,000 / 5,000 nodes
    python bench/rollout_plan.py --nodes 1000 --json    # one JSON object per size

The fleet is synthetic and seeded: nodes of 8 GPUs (8,000 milli-GPUs) filled to about 60 % with
1 to 6 workloads of 250 to 2,000 milli-GPUs; 10 % already at the target config; 1 % holding a
do-not-disrupt workload; 5 % not schedulable. Every node is a target; max unavailable is 1 % of
the fleet. The figure is the wall time of one ``plan_rollout`` call with the default best-fit
placer (the best of ``--repeat`` runs), which is what a rollout preview costs in the core.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduler.core.rollout import RolloutNode, RolloutWorkload, plan_rollout  # noqa: E402

OLD, NEW = ("mps", 2), ("mps", 4)


def fleet(size: int, seed: int) -> list[RolloutNode]:
    rng = random.Random(seed)
    nodes = []
    for i in range(size):
        workloads = []
        budget = 4800  # about 60 % of 8 GPUs
        for j in range(rng.randint(1, 6)):
            size_milli = min(rng.choice([250, 500, 1000, 2000]), budget)
            if size_milli <= 0:
                break
            budget -= size_milli
            workloads.append(RolloutWorkload(f"n{i}/w{j}", size_milli, do_not_disrupt=rng.random() < 0.01 / 3))
        nodes.append(RolloutNode(
            f"node-{i:05d}", NEW if rng.random() < 0.10 else OLD, 8000, tuple(workloads),
            schedulable=rng.random() >= 0.05,
        ))
    return nodes


def run(size: int, repeat: int, seed: int) -> dict[str, object]:
    cluster = fleet(size, seed)
    targets = [node.name for node in cluster]
    max_unavailable = max(1, size // 100)
    best = float("inf")
    plan = None
    for _ in range(repeat):
        start = time.perf_counter()
        plan = plan_rollout(cluster, targets, NEW, max_unavailable)
        best = min(best, time.perf_counter() - start)
    assert plan is not None
    return {
        "nodes": size, "max_unavailable": max_unavailable, "batches": len(plan.batches),
        "skipped": len(plan.skipped), "moves": len(plan.moves), "refusals": len(plan.refusals),
        "plan_s": round(best, 4), "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, action="append", help="fleet size (repeatable)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for size in args.nodes or [100, 1000, 5000]:
        result = run(size, args.repeat, args.seed)
        if args.json:
            print(json.dumps(result))
        else:
            print(f"{size:>6} nodes: {result['plan_s']:.3f} s, {result['batches']} batches, "
                  f"{result['moves']} moves, {result['skipped']} skipped, {result['refusals']} refusals")


if __name__ == "__main__":
    main()
