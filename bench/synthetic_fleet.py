"""A synthetic fleet written straight into the inventory tables, for the pages benchmark and scale tests.

bench/pages.py measures the fleet pages on it, and the scale tests (tests/nodes/test_fleet.py, the
browser's fleet-scale test) check them on it; it lives here, not under tests/, because a benchmark
does not depend on the test package. Import it once Django is set up.
"""
from __future__ import annotations

from typing import Any

from nodes.models import GPU, Node, Partition
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind

GPU_MEMORY_MIB = 81920  # an H100-SXM5-80GB


def make_fleet(nodes: int, gpus_per_node: int, *, prefix: str = "fleet", sampled_at: Any = None) -> None:
    """`nodes` nodes of `gpus_per_node` H100s each in a few bulk inserts, for bench/pages.py and
    scale tests: every 10th node cordoned, every 25th NotReady; every GPU with one exclusive
    partition, every 3rd GPU allocated (its partition used by a pod); telemetry on every GPU but
    those of every 7th node, with deterministic utilization, memory and power."""
    Node.objects.bulk_create(
        Node(name=f"{prefix}-{n:05d}", gpu_model="H100-SXM5-80GB", gpu_count=gpus_per_node,
             cordoned=n % 10 == 9, ready=n % 25 != 24)
        for n in range(nodes)
    )
    ids = dict(Node.objects.filter(name__startswith=f"{prefix}-").values_list("name", "id"))
    gpus = []
    for n in range(nodes):
        for index in range(gpus_per_node):
            k = n * gpus_per_node + index
            allocated = k % 3 == 0
            reporting = sampled_at is not None and n % 7 != 6
            gpus.append(GPU(
                node_id=ids[f"{prefix}-{n:05d}"], index=index, uuid=f"GPU-{prefix}-{n:05d}-{index}", model="H100-SXM5-80GB",
                memory_mib=GPU_MEMORY_MIB,
                allocated_milli=SHARE_MILLI_FULL if allocated else 0,
                allocated_memory_mib=GPU_MEMORY_MIB if allocated else 0,
                utilization_pct=float(k * 37 % 101) if reporting else None,
                memory_used_mib=k * 997 % GPU_MEMORY_MIB if reporting else None,
                power_w=100.0 + k * 13 % 600 if reporting else None,
                temperature_c=40.0 + k % 40 if reporting else None,
                sampled_at=sampled_at if reporting else None,
            ))
    GPU.objects.bulk_create(gpus, batch_size=2000)
    allocated_uuids = {gpu.uuid for gpu in gpus if gpu.allocated_milli}
    rows = GPU.objects.filter(node__name__startswith=f"{prefix}-").values_list("id", "uuid")
    Partition.objects.bulk_create(
        (
            Partition(gpu_id=gpu_id, kind=PartitionKind.EXCLUSIVE, slot=0, share_milli=SHARE_MILLI_FULL,
                      memory_mib=GPU_MEMORY_MIB, pod=f"ml/{uuid.lower()}" if uuid in allocated_uuids else "")
            for gpu_id, uuid in rows
        ),
        batch_size=2000,
    )
