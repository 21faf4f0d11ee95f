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
