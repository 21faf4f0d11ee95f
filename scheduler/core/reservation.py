"""Capacity bookkeeping on a node's objects: give partitions to a placement, take them back.

``ClusterSnapshot.reserve`` / ``release`` call these on the node's ``NodeState`` and then
recompute the node's columns. The rules here are the core's half of "over-allocation is
impossible" (the database's check constraints are the other): a reservation either fits
entirely or changes nothing.
"""
from __future__ import annotations

from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode
from scheduler.core.types import Assignment, GPUState, NodeState, PartitionState

_SLOT_MODES = frozenset({SharingMode.MPS, SharingMode.MPS_WEIGHTED, SharingMode.TIMESLICE})


class CapacityError(ValueError):
    """A reservation that does not fit what is free on the node (over-allocation refused)."""


def find_gpu(node: NodeState, gpu_index: int) -> GPUState:
    """The node's GPU with ``gpu_index``; ``KeyError`` when it has none."""
    for gpu in node.gpus:
        if gpu.index == gpu_index:
            return gpu
    raise KeyError(f"{node.name} has no GPU {gpu_index}")


def reserve_partitions(node: NodeState, assignment: Assignment) -> None:
    """Give the assignment's partitions on ``node`` to ``assignment.key``.

    Raises ``CapacityError`` (changing nothing) when any partition is not free: a MIG
    instance already held, no free slot, a taken slot number, or share / memory beyond what
    the GPU has left; or when the node's free CPU or host memory (where known) is short of the
    assignment's. The host requests are held under the key too (``NodeState.host_holds``).
    """
    _check_host(node, assignment)
    mode = SharingMode(node.sharing_mode)
    replicas = max(node.sharing_replicas, 1)
    changes: list[tuple[GPUState, PartitionState | None, PartitionState | None]] = []
    pending: dict[int, list[PartitionState]] = {}
    for grant in assignment.partitions:
        gpu = find_gpu(node, grant.gpu_index)
        added = pending.setdefault(gpu.index, [])
        occupied = [p for p in gpu.partitions if p.occupant] + added
        if grant.kind == PartitionKind.MIG:
            target = next((p for p in gpu.partitions if p.kind == PartitionKind.MIG and p.slot == grant.slot), None)
            if (not gpu.mig_enabled or target is None or target.occupant or target in added
                    or target.mig_profile != grant.mig_profile):
                raise CapacityError(f"{node.name}/gpu{gpu.index}: MIG instance {grant.slot} is not free")
            added.append(target)
            changes.append((gpu, target, None))
            continue
        if gpu.mig_enabled:
            raise CapacityError(f"{node.name}/gpu{gpu.index} is MIG-enabled; only its instances can be given")
        share_left = SHARE_MILLI_FULL - sum(p.share_milli for p in occupied)
        memory_left = gpu.memory_mib - sum(p.memory_mib for p in occupied)
        if grant.kind == PartitionKind.EXCLUSIVE:
            ok = mode in (SharingMode.EXCLUSIVE, SharingMode.MIG) and not occupied
            limit = 1
        else:
            ok = mode in _SLOT_MODES and str(grant.kind) == str(mode) and len(occupied) < replicas
            limit = replicas
        if not ok or grant.share_milli > share_left or grant.memory_mib > memory_left:
            raise CapacityError(
                f"{node.name}/gpu{gpu.index}: no room for {grant.kind} {grant.share_milli} milli, "
                f"{grant.memory_mib} MiB (free {share_left} milli, {memory_left} MiB; "
                f"{len(occupied)}/{limit} held)"
            )
        if any(p.slot == grant.slot for p in occupied):
            raise CapacityError(f"{node.name}/gpu{gpu.index}: slot {grant.slot} is taken")
        partition = PartitionState(kind=grant.kind, slot=grant.slot, share_milli=grant.share_milli,
                                   memory_mib=grant.memory_mib, occupant=assignment.key)
        added.append(partition)
        changes.append((gpu, None, partition))
    # Every grant checked: apply them all (nothing was changed if any check failed).
    if assignment.cpu_milli or assignment.host_memory_mib or not assignment.partitions:
        node.host_holds[assignment.key] = (assignment.cpu_milli, assignment.host_memory_mib)
    for gpu, instance, created in changes:
        if instance is not None:
            instance.occupant = assignment.key
        elif created is not None:
            # Drop a listed-but-free row with the same slot so a slot is never listed twice.
            gpu.partitions[:] = [p for p in gpu.partitions if p.occupant or p.slot != created.slot]
            gpu.partitions.append(created)


def _check_host(node: NodeState, assignment: Assignment) -> None:
    if assignment.key in node.host_holds:
        raise CapacityError(f"{node.name}: {assignment.key} already holds CPU and memory here")
    cpu, memory = node.cpu_free_milli, node.memory_free_mib
    if cpu is not None and assignment.cpu_milli > cpu:
        raise CapacityError(f"{node.name}: {assignment.cpu_milli}m CPU requested, {cpu}m free")
    if memory is not None and assignment.host_memory_mib > memory:
        raise CapacityError(f"{node.name}: {assignment.host_memory_mib} MiB memory requested, {memory} MiB free")


def release_partitions(node: NodeState, key: str) -> int:
    """Free everything ``key`` holds on ``node``; returns how many partitions were freed (its
    CPU and memory hold counts as one).

    MIG instances stay listed (free): the layout does not change. Every other kind is listed
    only while occupied, so its partition is removed.
    """
    freed = 1 if node.host_holds.pop(key, None) is not None else 0
    for gpu in node.gpus:
        kept: list[PartitionState] = []
        for partition in gpu.partitions:
            if partition.occupant != key:
                kept.append(partition)
                continue
            freed += 1
            if partition.kind == PartitionKind.MIG:
                partition.occupant = ""
                kept.append(partition)
        gpu.partitions[:] = kept
    return freed
