"""Trace replay with the FGD paper's protocol (docs/design.md section 13) on the Alibaba openb lists.

    python bench/trace_replay.py --pods ../shared/data/alibaba-gpu-v2023/openb_pod_list_default.csv \\
        --policy packing --seeds 42-51 --json

Prints allocation % of GPU milli at 100 % and 130 % arrived (mean and std over the seeds) and
the mean time per decision. ``balanced`` and ``packing`` are gpuplane: the API's profiles run by
``Scheduler.schedule`` (``bench/trace_profiles.py``), every pod of the list expressed in the
product's vocabulary. The other policies are the paper's baselines (random, bestfit, firstfit,
worstfit, fgd: ``scheduler.core.packing_policies``), which calibrate the replay against the
published figures. The seed's shuffled node order breaks ties for all of them. ``--jobs``
replays seeds in parallel processes (timings then share the machine).
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.trace_profiles import PROFILE_POLICIES, ProfileReplayer, workload_args  # noqa: E402
from gpuplane import allocator  # noqa: E402
from scheduler.core.fragmentation import typical_pods  # noqa: E402
from scheduler.core.packing import PackingCluster, PackNode, PackPod  # noqa: E402
from scheduler.core.packing_policies import POLICIES, choose, class_table  # noqa: E402

NODE_LIST = "openb_node_list_gpu_node.csv"  # looked for next to the pod list by default
ARRIVED_LIMIT = 1.3


def load_nodes(path: Path, limit: int | None = None) -> list[PackNode]:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))[:limit]
    return [PackNode(r["sn"], int(r["cpu_milli"]), int(r["memory_mib"]), int(r["gpu"]), r.get("model") or "")
            for r in rows]


def load_pods(path: Path) -> list[PackPod]:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    pods = []
    for r in rows:
        count = int(r["num_gpu"])
        milli = int(r["gpu_milli"]) if count else 0
        spec = tuple(m for m in (r.get("gpu_spec") or "").split("|") if m)
        pods.append(PackPod(int(r["cpu_milli"]), int(r["memory_mib"]), milli, count, spec))
    return pods


def workload(pods: list[PackPod], capacity: int, rng: np.random.Generator) -> list[PackPod]:
    """All pods in random order, then random draws (with replacement) until the next would take
    the total GPU request past 130 % of capacity."""
    order = [pods[i] for i in rng.permutation(len(pods))]
    total = sum(p.total_gpu_milli for p in order)
    while True:
        pod = pods[int(rng.integers(len(pods)))]
        if total + pod.total_gpu_milli > ARRIVED_LIMIT * capacity:
            return order
        order.append(pod)
        total += pod.total_gpu_milli


def replay(nodes: list[PackNode], pods: list[PackPod], policy: str, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    shuffled = [nodes[i] for i in rng.permutation(len(nodes))]  # the seed's tie-break order
    if policy in PROFILE_POLICIES:
        return _replay_profile(shuffled, pods, policy, seed, rng)
    cluster = PackingCluster(shuffled)
    capacity = cluster.gpu_capacity_milli
    cluster.track(class_table(
        typical_pods((p.cpu_milli, p.gpu_milli, p.gpu_count, p.gpu_models) for p in pods), list(cluster.models)))
    arrived = allocated = 0
    records: list[tuple[float, float]] = []
    elapsed = 0.0
    offered = workload(pods, capacity, rng)
    for pod in offered:
        start = time.perf_counter()
        choice = choose(policy, cluster, pod, rng=rng)
        if choice is not None:
            cluster.place(choice.row, pod, choice.gpus)
        elapsed += time.perf_counter() - start
        arrived += pod.total_gpu_milli
        if choice is not None:
            allocated += pod.total_gpu_milli
        records.append((100 * arrived / capacity, 100 * allocated / capacity))
    result = {"seed": seed, "ms_per_decision": 1000 * elapsed / len(offered), "pods": len(offered)}
    for mark in (100, 130):
        values = [alloc for arr, alloc in records if round(arr) == mark]
        result[f"alloc_{mark}"] = statistics.fmean(values) if values else float("nan")
    return result


def _replay_profile(shuffled: list[PackNode], pods: list[PackPod], policy: str, seed: int,
                    rng: np.random.Generator) -> dict[str, float]:
    """``replay`` through the API's Scheduler running the profile called ``policy``."""
    replayer = ProfileReplayer(policy, shuffled, workload_args(pods))
    capacity = sum(n.gpu_count for n in shuffled) * 1000
    offered = workload(pods, capacity, rng)
    arrived = allocated = 0
    records: list[tuple[float, float]] = []
    for pod in offered:
        arrived += pod.total_gpu_milli
        if replayer.place(pod):
            allocated += pod.total_gpu_milli
        records.append((100 * arrived / capacity, 100 * allocated / capacity))
    result: dict[str, float] = {"seed": seed, "ms_per_decision": 1000 * replayer.elapsed / len(offered),
                                "pods": len(offered), "unexpressible": replayer.unexpressible}
    for mark in (100, 130):
        values = [alloc for arr, alloc in records if round(arr) == mark]
        result[f"alloc_{mark}"] = statistics.fmean(values) if values else float("nan")
    return result


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


def _summary(policy: str, pods_path: Path, runs: list[dict[str, float]]) -> dict[str, object]:
    summary: dict[str, object] = {"policy": policy, "pods": pods_path.name, "seeds": [r["seed"] for r in runs]}
    for mark in (100, 130):
        values = [r[f"alloc_{mark}"] for r in runs]
        summary[f"alloc_{mark}_mean"] = round(statistics.fmean(values), 3)
        summary[f"alloc_{mark}_std"] = round(statistics.pstdev(values), 3)
    summary["ms_per_decision"] = round(statistics.fmean(r["ms_per_decision"] for r in runs), 3)
    summary["per_seed"] = [{k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()} for r in runs]
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=Path, required=True)
    parser.add_argument("--nodes", type=Path, default=None, help=f"default: {NODE_LIST} beside --pods")
    parser.add_argument("--policy", choices=POLICIES + PROFILE_POLICIES, required=True)
    parser.add_argument("--seeds", default="42-51")
    parser.add_argument("--limit-nodes", type=int, default=None, help="only the first N nodes (quick runs)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    allocator.tune()  # as every gpuplane process does at start (gpuplane/allocator.py)
    nodes = load_nodes(args.nodes or args.pods.parent / NODE_LIST, args.limit_nodes)
    pods = load_pods(args.pods)
    seeds = parse_seeds(args.seeds)
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as pool:
            runs = list(pool.map(replay, [nodes] * len(seeds), [pods] * len(seeds), [args.policy] * len(seeds), seeds))
    else:
        runs = [replay(nodes, pods, args.policy, seed) for seed in seeds]
    summary = _summary(args.policy, args.pods, runs)
    if args.policy in PROFILE_POLICIES:
        summary["unexpressible"] = sum(int(r["unexpressible"]) for r in runs)
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['policy']:10} {summary['pods']}: alloc@100 {summary['alloc_100_mean']:.2f} "
              f"alloc@130 {summary['alloc_130_mean']:.2f} ± {summary['alloc_130_std']:.2f} "
              f"({summary['ms_per_decision']:.2f} ms/decision)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
