"""Partition assignment on the chosen node: which GPU(s) and which partition, and the pod's env.

Runs on one node's Python objects, after the vectorized filters picked the node; the rules are
those of ``scheduler.core.fit`` (the two must agree, and a property test checks that they do):

- whole GPUs: the lowest free indexes with enough memory each;
- MIG: the smallest free instance (geometry order) with the memory and the compute the sizing
  demands of MIG (memory only, unless a share was stated), lowest GPU, lowest start;
- ``mps``: a free slot on the GPU with the fewest free slots (fills GPUs before opening new ones);
  the slot's share is 1000 // R and its memory the GPU's memory // R;
- ``mps-weighted``: the GPU with the least free share that still covers the request (then the
  least free memory that does, then the lowest index), a share of exactly the request's size (a
  score plugin may prefer some GPUs: ``gpu_hint``, the GPU it scored, when it fits); a
  multi-GPU replica that asks for mps-weighted takes the lowest untouched GPUs, 100 % of each;
- ``timeslice``: a replica on the GPU with the least free memory that still covers the request;
  its memory is the request's (gpuplane's own accounting: time-slicing isolates nothing).

MPS placements get ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
(``0=10G``: device 0 is the only GPU visible inside the pod; ``0=80G,1=80G`` for a gang). A
CPU-only request (no GPU) gets no partition: only its CPU and host memory, held on the node.
Every assignment carries the request's CPU and host memory (``cpu_milli``, ``host_memory_mib``).
"""
from __future__ import annotations

from dataclasses import replace

from nodes.contract import ENV_MPS_MEMORY_LIMIT, ENV_MPS_THREAD_PERCENTAGE, RESOURCE_GPU, RESOURCE_MIG_PREFIX
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode
from scheduler.core.fit import WEIGHTED_GANG, Need
from scheduler.core.types import Assignment, GPUState, NodeState, PartitionGrant, slot_share_milli


def format_memory_limit(memory_mib: int, device: int = 0) -> str:
    """``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` value: "0=10G" for whole GiB, else "0=1536M"."""
    if memory_mib % 1024 == 0:
        return f"{device}={memory_mib // 1024}G"
    return f"{device}={memory_mib}M"


def format_thread_percentage(share_milli: int) -> str:
    """``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: the share in whole percent, rounded down, at least 1.

    Rounding down keeps the sum of shares on a GPU within 100 %.
    """
    return str(max(share_milli // 10, 1))


def mps_env(share_milli: int, memory_mib: int) -> dict[str, str]:
    """The MPS variables for a client with this share and memory."""
    return {
        ENV_MPS_THREAD_PERCENTAGE: format_thread_percentage(share_milli),
        ENV_MPS_MEMORY_LIMIT: format_memory_limit(memory_mib),
    }


def _free_slot(gpu: GPUState) -> int:
    taken = {p.slot for p in gpu.partitions if p.occupant}
    slot = 0
    while slot in taken:
        slot += 1
    return slot


def _occupied(gpu: GPUState) -> list:  # list[PartitionState]
    return [p for p in gpu.partitions if p.occupant]


def assign(node: NodeState, need: Need, key: str, mig_profiles: tuple[str, ...] = (), *, cpu_milli: int = 0,
           host_memory_mib: int = 0, gpu_hint: int | None = None) -> Assignment | None:
    """The partition(s) ``need`` gets on ``node``, or None when nothing there fits.

    ``mig_profiles`` are the node model's profile names in geometry order (the snapshot's
    ``models.mig_profiles[model_id]``); they order MIG instances from smallest to largest.
    ``cpu_milli`` / ``host_memory_mib`` are the pod's host requests, carried by the result;
    ``gpu_hint`` the GPU (position in ``node.gpus``) a weighted share should take when it fits
    there. Does not change the node: ``ClusterSnapshot.reserve`` applies the result.
    """
    found = _assign(node, need, key, mig_profiles, gpu_hint)
    if found is None or not (cpu_milli or host_memory_mib):
        return found
    return replace(found, cpu_milli=cpu_milli, host_memory_mib=host_memory_mib)


def _assign(node: NodeState, need: Need, key: str, mig_profiles: tuple[str, ...],
            gpu_hint: int | None) -> Assignment | None:
    mode = SharingMode(node.sharing_mode)
    kinds = need.kinds
    if need.cpu_only:
        return Assignment(node=node.name, key=key, kind=PartitionKind.EXCLUSIVE, partitions=(), resources={}, env={})
    if mode in (SharingMode.EXCLUSIVE, SharingMode.MIG):
        mig = None
        if mode == SharingMode.MIG and need.gpu_count == 1 and PartitionKind.MIG in kinds:
            mig = _assign_mig(node, need, key, mig_profiles)
        whole = _assign_whole(node, need, key) if PartitionKind.EXCLUSIVE in kinds else None
        if mig is not None and (whole is None or mig.partitions[0].share_milli < SHARE_MILLI_FULL):
            return mig
        return whole
    if mode == SharingMode.MPS_WEIGHTED and need.gpu_count > 1 and kinds == WEIGHTED_GANG:
        return _assign_weighted_gang(node, need, key)
    if need.gpu_count != 1:
        return None
    if mode == SharingMode.MPS_WEIGHTED and PartitionKind.MPS_WEIGHTED in kinds:
        return _assign_weighted(node, need, key, gpu_hint)
    if mode == SharingMode.MPS and PartitionKind.MPS in kinds:
        return _assign_mps(node, need, key)
    if mode == SharingMode.TIMESLICE and PartitionKind.TIMESLICE in kinds:
        return _assign_timeslice(node, need, key)
    return None


def _assign_whole(node: NodeState, need: Need, key: str) -> Assignment | None:
    whole_ok = [
        gpu
        for gpu in node.gpus
        if not gpu.mig_enabled and not _occupied(gpu) and gpu.memory_mib >= need.memory_per_gpu_mib
    ]
    if len(whole_ok) < need.gpu_count:
        return None
    chosen = whole_ok[: need.gpu_count]  # node.gpus are in index order: the lowest free indexes
    grants = tuple(
        PartitionGrant(
            gpu_index=gpu.index,
            kind=PartitionKind.EXCLUSIVE,
            slot=0,
            share_milli=SHARE_MILLI_FULL,
            memory_mib=gpu.memory_mib,
        )
        for gpu in chosen
    )
    return Assignment(
        node=node.name,
        key=key,
        kind=PartitionKind.EXCLUSIVE,
        partitions=grants,
        resources={RESOURCE_GPU: need.gpu_count},
        env={},
    )


def _assign_mig(node: NodeState, need: Need, key: str, mig_profiles: tuple[str, ...]) -> Assignment | None:
    rank = {name: row for row, name in enumerate(mig_profiles)}
    best = None
    for position, gpu in enumerate(node.gpus):
        if not gpu.mig_enabled:
            continue
        for partition in gpu.partitions:
            if (
                partition.kind != PartitionKind.MIG
                or partition.occupant
                or partition.share_milli < need.min_share(PartitionKind.MIG)
                or partition.memory_mib < need.memory_mib
            ):
                continue
            if partition.mig_profile not in rank:
                continue  # a profile the catalog does not know for this model is never handed out
            order = (rank[partition.mig_profile], position, partition.mig_start or 0)
            if best is None or order < best[0]:
                best = (order, gpu, partition)
    if best is None:
        return None
    _, gpu, partition = best
    grant = PartitionGrant(
        gpu_index=gpu.index,
        kind=PartitionKind.MIG,
        slot=partition.slot,
        share_milli=partition.share_milli,
        memory_mib=partition.memory_mib,
        mig_profile=partition.mig_profile,
        mig_start=partition.mig_start,
        mig_size=partition.mig_size,
    )
    return Assignment(
        node=node.name,
        key=key,
        kind=PartitionKind.MIG,
        partitions=(grant,),
        resources={RESOURCE_MIG_PREFIX + partition.mig_profile: 1},
        env={},
    )


def _slot_candidates(node: NodeState) -> list[tuple[int, GPUState, int]]:
    """(free slots, GPU, position) for the node's non-MIG GPUs with a free slot."""
    replicas = max(node.sharing_replicas, 1)
    out = []
    for position, gpu in enumerate(node.gpus):
        if gpu.mig_enabled:
            continue
        free = replicas - len(_occupied(gpu))
        if free > 0:
            out.append((free, gpu, position))
    return out


def _single(node: NodeState, key: str, kind: PartitionKind, gpu: GPUState, share: int, memory: int,
            env: dict[str, str]) -> Assignment:
    grant = PartitionGrant(gpu_index=gpu.index, kind=kind, slot=_free_slot(gpu), share_milli=share, memory_mib=memory)
    return Assignment(node=node.name, key=key, kind=kind, partitions=(grant,), resources={RESOURCE_GPU: 1}, env=env)


def _assign_mps(node: NodeState, need: Need, key: str) -> Assignment | None:
    replicas = max(node.sharing_replicas, 1)
    share = slot_share_milli(replicas)
    if share < need.min_share(PartitionKind.MPS):
        return None
    fitting = [(free, position, gpu) for free, gpu, position in _slot_candidates(node)
               if gpu.memory_mib // replicas >= need.memory_mib]
    if not fitting:
        return None
    _, _, gpu = min(fitting, key=lambda item: (item[0], item[1]))
    memory = gpu.memory_mib // replicas
    return _single(node, key, PartitionKind.MPS, gpu, share, memory, mps_env(share, memory))


def _assign_weighted(node: NodeState, need: Need, key: str, gpu_hint: int | None = None) -> Assignment | None:
    fitting = []
    for _free, gpu, position in _slot_candidates(node):
        occupied = _occupied(gpu)
        free_share = SHARE_MILLI_FULL - sum(p.share_milli for p in occupied)
        free_memory = gpu.memory_mib - sum(p.memory_mib for p in occupied)
        if free_share >= need.share_milli and free_memory >= need.memory_mib:
            fitting.append((free_share, free_memory, position, gpu))
    if not fitting:
        return None
    hinted = [item for item in fitting if item[2] == gpu_hint]
    *_, gpu = min(hinted or fitting, key=lambda item: item[:3])
    return _single(node, key, PartitionKind.MPS_WEIGHTED, gpu, need.share_milli, need.memory_mib,
                   mps_env(need.share_milli, need.memory_mib))


def _assign_weighted_gang(node: NodeState, need: Need, key: str) -> Assignment | None:
    """The lowest-index untouched GPUs of a weighted node, 100 % of each (a whole GPU apiece)."""
    untouched = [gpu for free, gpu, _position in _slot_candidates(node)
                 if not _occupied(gpu) and gpu.memory_mib >= need.memory_per_gpu_mib]
    if len(untouched) < need.gpu_count:
        return None
    chosen = untouched[: need.gpu_count]
    grants = tuple(PartitionGrant(gpu_index=gpu.index, kind=PartitionKind.MPS_WEIGHTED, slot=_free_slot(gpu),
                                  share_milli=SHARE_MILLI_FULL, memory_mib=gpu.memory_mib) for gpu in chosen)
    env = {ENV_MPS_THREAD_PERCENTAGE: format_thread_percentage(SHARE_MILLI_FULL),
           ENV_MPS_MEMORY_LIMIT: ",".join(format_memory_limit(gpu.memory_mib, device)
                                          for device, gpu in enumerate(chosen))}
    return Assignment(node=node.name, key=key, kind=PartitionKind.MPS_WEIGHTED, partitions=grants,
                      resources={RESOURCE_GPU: need.gpu_count}, env=env)


def _assign_timeslice(node: NodeState, need: Need, key: str) -> Assignment | None:
    share = slot_share_milli(node.sharing_replicas)
    if share < need.min_share(PartitionKind.TIMESLICE):  # 0 unless a share was stated
        return None
    fitting = []
    for _free, gpu, position in _slot_candidates(node):
        free_memory = gpu.memory_mib - sum(p.memory_mib for p in _occupied(gpu))
        if free_memory >= need.memory_mib:
            fitting.append((free_memory, position, gpu))
    if not fitting:
        return None
    _, _, gpu = min(fitting, key=lambda item: (item[0], item[1]))
    return _single(node, key, PartitionKind.TIMESLICE, gpu, share, need.memory_mib, {})
