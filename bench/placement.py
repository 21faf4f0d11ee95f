"""Placement core benchmark: decisions per second and latency at 100 .. 10,000 nodes of 8 GPUs.

    python bench/placement.py                       # table for 100 / 1,000 / 5,000 / 10,000 nodes
    python bench/placement.py --nodes 5000 --json   # one JSON object (nodes, decisions_per_s, p50_ms, p99_ms, ...)

The cluster is synthetic but shaped like a real heterogeneous fleet (seeded, reproducible):
H100 / A100-80GB / A100-40GB / L40S / L4 nodes; exclusive, MPS R=2 and R=4, weighted MPS,
time-slicing and MIG nodes; zone and pool labels plus a unique hostname label; a few tainted,
cordoned, not-ready and metric-less nodes; GPUs pre-filled to about 55 % with existing
occupants and given random telemetry. Requests mix tiny / medium / large models, tensor-parallel
gangs, priorities, latency SLOs, node selectors, tolerations and GPU model constraints.

Every measured decision is a full ``Scheduler.schedule`` call *including the reservation*
applied to the snapshot, so the cluster fills up as it would. To keep the occupancy steady over
thousands of decisions, the oldest of our placements is released (outside the timed section)
once more than ``--window`` are live, like deployments ending.

kube-scheduler's CI floor for comparison: 680 pods/s at 5,000 nodes (basic pods).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from gpuplane import allocator  # noqa: E402
from nodes.catalog import find_model  # noqa: E402
from nodes.vocabulary import PartitionKind, SharingMode, Taint  # noqa: E402
from scheduler.core import (  # noqa: E402
    ClusterSnapshot,
    NodeState,
    Outcome,
    PartitionState,
    PlacementRequest,
    Priority,
    SharingRequest,
    Toleration,
    WorkloadType,
    new_gpus,
    scheduler_for,
)
from scheduler.core.types import slot_share_milli  # noqa: E402

GPUS_PER_NODE = 8
MODELS = (("H100-SXM5-80GB", 0.30), ("A100-SXM4-80GB", 0.25), ("A100-SXM4-40GB", 0.25), ("L40S", 0.10), ("L4", 0.10))
MODES = (
    (SharingMode.EXCLUSIVE, 1, 0.40),
    (SharingMode.MPS, 2, 0.10),
    (SharingMode.MPS, 4, 0.10),
    (SharingMode.MPS_WEIGHTED, 4, 0.15),
    (SharingMode.TIMESLICE, 4, 0.10),
    (SharingMode.MIG, 1, 0.15),
)
ZONES = ("zone-a", "zone-b", "zone-c")
DEFAULT_SIZES = (100, 1000, 5000, 10000)


def _pick(rng: random.Random, options):  # type: ignore[no-untyped-def]
    """One option of (value..., weight) tuples, drawn by weight; the value alone when it is one item."""
    values = [option[:-1] for option in options]
    value = rng.choices(values, weights=[option[-1] for option in options])[0]
    return value[0] if len(value) == 1 else value


def _mig_layout(model_key: str) -> dict[str, int]:
    """One 3g, one 2g and one two-slice 1g instance: valid on every MIG model (7 of 8 slices)."""
    profiles = find_model(model_key).mig_profiles
    return {profiles[3].name: 1, profiles[2].name: 1, profiles[1].name: 1}


def _prefill(rng: random.Random, node: NodeState, occupancy: float) -> None:
    """Give about ``occupancy`` of each GPU to existing occupants, the way each mode allows."""
    replicas = node.sharing_replicas
    for gpu in node.gpus:
        if gpu.mig_enabled:
            for partition in gpu.partitions:
                if rng.random() < occupancy:
                    partition.occupant = f"pre/{node.name}-{gpu.index}-{partition.slot}"
            continue
        mode = node.sharing_mode
        if mode in (SharingMode.EXCLUSIVE, SharingMode.MIG):
            if rng.random() < occupancy:
                gpu.partitions.append(PartitionState(PartitionKind.EXCLUSIVE, 0, 1000, gpu.memory_mib,
                                                     occupant=f"pre/{node.name}-{gpu.index}"))
            continue
        taken = sum(rng.random() < occupancy for _ in range(replicas))
        share_left, memory_left = 1000, gpu.memory_mib
        for slot in range(taken):
            if mode == SharingMode.MPS:
                share, memory = slot_share_milli(replicas), gpu.memory_mib // replicas
            elif mode == SharingMode.TIMESLICE:
                share, memory = slot_share_milli(replicas), min(rng.choice((2048, 4096, 8192)), memory_left)
            else:
                share = min(rng.choice((100, 250, 250, 500)), share_left)
                memory = min(rng.choice((2048, 4096, 8192)), memory_left)
            if share <= 0:
                break
            share_left -= share
            memory_left -= memory
            gpu.partitions.append(PartitionState(PartitionKind(str(mode)), slot, share, memory,
                                                 occupant=f"pre/{node.name}-{gpu.index}-{slot}"))


def build_cluster(nodes: int, seed: int = 42, occupancy: float = 0.55) -> ClusterSnapshot:
    """A synthetic fleet of ``nodes`` 8-GPU nodes (see the module docstring)."""
    rng = random.Random(seed)
    states = []
    for i in range(nodes):
        model = _pick(rng, MODELS)
        mode, replicas = _pick(rng, MODES)
        if mode == SharingMode.MIG and not find_model(model).mig_capable:
            mode, replicas = SharingMode.EXCLUSIVE, 1
        if mode in (SharingMode.MPS, SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE) and model == "L4":
            replicas = 2  # 23 GB boards are shared by fewer clients
        layout = _mig_layout(model) if mode == SharingMode.MIG else None
        # MIG nodes keep their last two GPUs whole (mig-parted `mig-enabled: false`).
        gpus = new_gpus(model, GPUS_PER_NODE, mig_layout=layout, mig_gpus=GPUS_PER_NODE - 2 if layout else None)
        name = f"gpu-node-{i:05d}"
        metrics = rng.random() >= 0.05
        for gpu in gpus:
            if metrics:
                gpu.utilization_pct = round(min(100.0, rng.betavariate(2, 3) * 110), 1)
                gpu.memory_used_mib = int(gpu.memory_mib * rng.random() * 0.8)
                gpu.power_w = round(find_model(model).tdp_w * (0.2 + 0.8 * rng.random()), 1)
        node = NodeState(
            name=name,
            gpu_model=model,
            sharing_mode=mode,
            sharing_replicas=replicas,
            gpus=gpus,
            labels={
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": rng.choice(ZONES),
                "gpuplane.io/pool": "training" if rng.random() < 0.2 else "inference",
            },
            taints=(Taint("dedicated", "training"),) if rng.random() < 0.05 else (),
            ready=rng.random() >= 0.01,
            cordoned=rng.random() < 0.01,
        )
        _prefill(rng, node, occupancy)
        states.append(node)
    return ClusterSnapshot(states)


def make_request(rng: random.Random, number: int) -> PlacementRequest:
    """A request from the benchmark's workload mix."""
    roll = rng.random()
    gpu_count = 1
    if roll < 0.30:
        memory = rng.randint(1024, 4000)
    elif roll < 0.65:
        memory = rng.randint(4096, 16384)
    elif roll < 0.90:
        memory = rng.randint(20 * 1024, 70 * 1024)
    else:
        gpu_count = rng.choice((2, 4, 8))
        memory = rng.randint(30 * 1024, 70 * 1024) * gpu_count
    priority = rng.choice((Priority.HIGH, Priority.MEDIUM, Priority.MEDIUM, Priority.LOW))
    kwargs: dict[str, object] = {}
    if priority == Priority.HIGH and rng.random() < 0.5:
        kwargs["latency_slo_ms"] = rng.choice((50, 100, 250))
    extra = rng.random()
    if extra < 0.05:
        kwargs["node_selector"] = {"topology.kubernetes.io/zone": rng.choice(ZONES)}
    elif extra < 0.10:
        kwargs["tolerations"] = (Toleration("dedicated", "Equal", "training"),)
        kwargs["node_selector"] = {"gpuplane.io/pool": "training"}
    elif extra < 0.15:
        kwargs["gpu_models"] = ("H100",)
    elif extra < 0.18 and gpu_count == 1:
        kwargs["sharing"] = rng.choice((SharingRequest.MPS, SharingRequest.MIG, SharingRequest.MPS_WEIGHTED))
    return PlacementRequest(
        key=f"bench/req-{number}#0",
        memory_mib=memory,
        gpu_count=gpu_count,
        priority=priority,
        workload_type=rng.choice(tuple(WorkloadType)),
        namespace=rng.choice(("team-a", "team-b", "team-c")),
        **kwargs,  # type: ignore[arg-type]
    )


def run(nodes: int, decisions: int, *, profile: str = "balanced", seed: int = 42, window: int = 500,
        warmup: int = 50) -> dict[str, object]:
    """Build the cluster, make ``warmup`` untimed then ``decisions`` timed decisions; return figures."""
    started = time.perf_counter()
    snapshot = build_cluster(nodes, seed)
    build_s = time.perf_counter() - started
    # The snapshot's ~10 objects per GPU live as long as the process; moving them out of the
    # cyclic collector's generations keeps full collections (tens of ms at 80,000 GPUs) out of
    # the latency tail. A long-lived scheduler process would do the same after a rebuild.
    gc.collect()
    gc.freeze()
    scheduler = scheduler_for(profile)
    rng = random.Random(seed + 1)
    live: deque = deque()
    durations: list[float] = []
    cpu_durations: list[float] = []
    outcomes = {str(o): 0 for o in Outcome}
    for number in range(warmup + decisions):
        request = make_request(rng, number)
        c0 = time.thread_time()
        t0 = time.perf_counter()
        decision = scheduler.schedule(request, snapshot)
        elapsed = time.perf_counter() - t0
        cpu = time.thread_time() - c0
        if number >= warmup:
            durations.append(elapsed)
            cpu_durations.append(cpu)
            outcomes[str(decision.outcome)] += 1
        if decision.assignment is not None:
            live.append(decision.assignment)
            if len(live) > window:
                snapshot.unreserve(live.popleft())
    gc.unfreeze()
    total = sum(durations)
    ordered = sorted(durations)
    cpu_ordered = sorted(cpu_durations)

    def pct(q: float, values: list[float] = ordered) -> float:
        return values[min(len(values) - 1, int(q * len(values)))] * 1000

    return {
        "nodes": nodes,
        "gpus": nodes * GPUS_PER_NODE,
        "profile": profile,
        "decisions": decisions,
        "decisions_per_s": round(decisions / total, 1) if total else None,
        "p50_ms": round(pct(0.50), 3),
        "p99_ms": round(pct(0.99), 3),
        "max_ms": round(ordered[-1] * 1000, 3),
        "mean_ms": round(statistics.fmean(durations) * 1000, 3),
        # CPU time of the deciding thread: what the code costs when other processes share the cores.
        "cpu_decisions_per_s": round(decisions / sum(cpu_durations), 1) if sum(cpu_durations) else None,
        "cpu_p50_ms": round(pct(0.50, cpu_ordered), 3),
        "cpu_p99_ms": round(pct(0.99, cpu_ordered), 3),
        "placed_pct": round(100 * outcomes["placed"] / decisions, 1),
        "outcomes": outcomes,
        "snapshot_build_s": round(build_s, 2),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "allocator_tuned": allocator.is_tuned(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, action="append", help="cluster size (repeatable); default 100/1k/5k/10k")
    parser.add_argument("--decisions", type=int, default=2000, help="timed decisions per size (default 2000)")
    parser.add_argument("--profile", default="balanced", help="scheduling profile (balanced, packing)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--window", type=int, default=500, help="live placements kept before releasing the oldest")
    parser.add_argument("--json", action="store_true", help="print one JSON object per size instead of a table")
    args = parser.parse_args(argv)
    allocator.tune()  # as every gpuplane process does at start (gpuplane/allocator.py)
    sizes = args.nodes or list(DEFAULT_SIZES)
    results = []
    for size in sizes:
        result = run(size, args.decisions, profile=args.profile, seed=args.seed, window=args.window)
        results.append(result)
        if args.json:
            print(json.dumps(result), flush=True)
    if not args.json:
        print(f"placement core, profile {args.profile}, {args.decisions} decisions per size, "
              f"Python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs")
        print(f"{'nodes':>7} {'GPUs':>7} {'decisions/s':>12} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
              f"{'CPU dec/s':>10} {'CPU p99':>8} {'placed %':>9}")
        for r in results:
            print(f"{r['nodes']:>7,} {r['gpus']:>7,} {r['decisions_per_s']:>12,.0f} {r['p50_ms']:>8.3f} "
                  f"{r['p99_ms']:>8.3f} {r['max_ms']:>8.3f} {r['cpu_decisions_per_s']:>10,.0f} "
                  f"{r['cpu_p99_ms']:>8.3f} {r['placed_pct']:>9.1f}")
        print("kube-scheduler CI floor: 680 pods/s at 5,000 nodes (basic pods)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
