"""Plain helpers that create inventory rows for tests (no factory library, no randomness)."""
from __future__ import annotations

from typing import Any

from nodes.models import GPU, Node, Partition
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind

DEFAULT_GPU_MEMORY_MIB = 81920  # an 80 GB part (H100 / A100-80GB)


def make_node(
    name: str,
    gpu_model: str = "H100-SXM5-80GB",
    gpu_count: int = 2,
    sharing_mode: str = "exclusive",
    *,
    gpu_memory_mib: int = DEFAULT_GPU_MEMORY_MIB,
    partitions: bool = True,
    **fields: Any,
) -> Node:
    """Create a node with `gpu_count` GPUs (index i, uuid f"GPU-{name}-{i}", model `gpu_model`).

    With `partitions=True` each GPU gets one free exclusive partition (slot 0, the whole GPU),
    whatever the sharing mode; pass `partitions=False` and use make_partition() for other layouts.
    `fields` go to Node (ready, cordoned, labels, sharing_replicas, ...).
    """
    node = Node.objects.create(
        name=name, gpu_model=gpu_model, gpu_count=gpu_count, sharing_mode=sharing_mode, **fields
    )
    for index in range(gpu_count):
        gpu = GPU.objects.create(
            node=node, index=index, uuid=f"GPU-{name}-{index}", model=gpu_model, memory_mib=gpu_memory_mib
        )
        if partitions:
            make_partition(gpu)
    return node


def make_partition(
    gpu: GPU,
    kind: str = PartitionKind.EXCLUSIVE,
    slot: int = 0,
    share_milli: int = SHARE_MILLI_FULL,
    memory_mib: int | None = None,
    **fields: Any,
) -> Partition:
    """Create one partition on `gpu` (default: the whole GPU, free). Does not touch GPU.allocated_*.

    `memory_mib` defaults to the GPU's memory; MIG partitions need mig_profile/mig_start/mig_size
    in `fields` (the database refuses them otherwise). `placement=`: a scheduler Placement that
    holds it (a `scheduler.PartitionHold` row; tests may cross the apps, nodes code may not).
    """
    placement = fields.pop("placement", None)
    partition = Partition.objects.create(
        gpu=gpu,
        kind=kind,
        slot=slot,
        share_milli=share_milli,
        memory_mib=gpu.memory_mib if memory_mib is None else memory_mib,
        **fields,
    )
    if placement is not None:
        hold_partition(partition, placement)
    return partition


def hold_partition(partition: Partition, placement: Any) -> None:
    """Make `placement` (a scheduler Placement) hold `partition`, as the scheduler's claim does."""
    from scheduler.models import PartitionHold

    PartitionHold.objects.create(partition=partition, placement=placement)


def make_fleet(nodes: int, gpus_per_node: int, *, prefix: str = "fleet", sampled_at: Any = None) -> None:
    """`nodes` nodes of `gpus_per_node` H100s each in a few bulk inserts, for scale tests and
    bench/pages.py: every 10th node cordoned, every 25th NotReady; every GPU with one exclusive
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
                memory_mib=DEFAULT_GPU_MEMORY_MIB,
                allocated_milli=SHARE_MILLI_FULL if allocated else 0,
                allocated_memory_mib=DEFAULT_GPU_MEMORY_MIB if allocated else 0,
                utilization_pct=float(k * 37 % 101) if reporting else None,
                memory_used_mib=k * 997 % DEFAULT_GPU_MEMORY_MIB if reporting else None,
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
                      memory_mib=DEFAULT_GPU_MEMORY_MIB, pod=f"ml/{uuid.lower()}" if uuid in allocated_uuids else "")
            for gpu_id, uuid in rows
        ),
        batch_size=2000,
    )
