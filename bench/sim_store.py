"""The simulated cluster's store alone: one process, N nodes, the calls the deploy path and the watch make.

    python bench/sim_store.py --nodes 5000 --calls 40 [--json]

Loads N eight-GPU nodes with `add_gpu_nodes` into a fresh state file under a temporary
directory, then, from a second SimulatedCluster on the same file (as another instance in the
process), times `create_workload` of N one-GPU Deployments pinned to distinct nodes, one
`workload_ready` per Deployment and one `list_nodes`. Medians in milliseconds. No Django, no
database: what a call to the simulated cluster costs by itself.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nodes.cluster.base import WorkloadSpec  # noqa: E402
from nodes.cluster.sim import SimulatedCluster  # noqa: E402


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    path = Path(tempfile.mkdtemp(prefix="gpuplane-sim-store-")) / "simulated-cluster.json"
    started = time.perf_counter()
    SimulatedCluster(path).add_gpu_nodes([
        {"name": f"node-{i:05d}", "product": "NVIDIA-H100-80GB-HBM3", "gpu_count": 8, "gpu_memory_mib": 81559}
        for i in range(args.nodes)
    ])
    load_s = _ms(started) / 1000
    cluster = SimulatedCluster(path)
    creates, readies = [], []
    for i in range(args.calls):
        spec = WorkloadSpec(namespace="bench", name=f"w{i}", node_name=f"node-{i * 7 % args.nodes:05d}",
                            image="bench", replicas=1, resources={"nvidia.com/gpu": 1})
        started = time.perf_counter()
        cluster.create_workload(spec)
        creates.append(_ms(started))
    for i in range(args.calls):
        started = time.perf_counter()
        cluster.workload_ready("bench", f"w{i}")
        readies.append(_ms(started))
    started = time.perf_counter()
    cluster.list_nodes()
    list_nodes_ms = _ms(started)
    result = {
        "nodes": args.nodes, "calls": args.calls, "load_s": round(load_s, 1),
        "state_file_mb": round(path.stat().st_size / 1e6, 1),
        "create_workload_p50_ms": round(statistics.median(creates), 2), "create_workload_max_ms": round(max(creates), 1),
        "workload_ready_p50_ms": round(statistics.median(readies), 2), "list_nodes_ms": round(list_nodes_ms, 1),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:24s} {value}")


if __name__ == "__main__":
    main()
