"""Partition geometry: the partitions a GPU offers under its node's sharing mode.

A shape is everything about a partition but its slot, device UUID and occupant, so that inventory
sync can tell an existing row that still fits from one to replace by comparing shapes.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from nodes.catalog import MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, GPUModel
from nodes.cluster.base import GPUDevice, MIGDevice
from nodes.inventory.labels import NodeSharing
from nodes.models import Partition
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind, SharingMode

logger = logging.getLogger(__name__)

_MIG_PROFILE_COMPUTE = re.compile(r"^(\d+)g\.")


@dataclass(frozen=True)
class PartitionShape:
    """The geometry of a partition: everything but its slot, device UUID and occupant."""

    kind: str
    share_milli: int
    memory_mib: int
    mig_profile: str = ""
    mig_start: int | None = None
    mig_size: int | None = None

    @classmethod
    def of(cls, partition: Partition) -> PartitionShape:
        """The shape of a stored partition."""
        return cls(
            kind=partition.kind,
            share_milli=partition.share_milli,
            memory_mib=partition.memory_mib,
            mig_profile=partition.mig_profile,
            mig_start=partition.mig_start,
            mig_size=partition.mig_size,
        )


def fixed_partition_shapes(
    sharing: NodeSharing, gpu: GPUDevice, model: GPUModel | None
) -> list[tuple[PartitionShape, str]]:
    """The partitions a GPU offers under its node's sharing mode, with MIG device UUIDs.

    exclusive: the whole GPU; mig: one per MIG device (share = compute slices x 1000 // 7, memory
    as the node agent reported it, else from the catalog profile); mps R: R slots of 1000 // R and memory // R (the MPS daemon pins
    memory per client); timeslice R: R replicas of 1000 // R that may each touch all memory (no
    isolation: memory is accounted per pod, see `nodes.inventory.gpu_rows`). A non-MIG GPU of a
    MIG node is exclusive. Weighted MPS has no fixed partitions (they follow its pods and
    holders), so it returns [].
    """
    if gpu.mig_enabled:
        shapes = []
        for device in sorted(gpu.mig_devices, key=lambda d: d.start):
            shape = mig_shape(device, gpu, model)
            if shape is not None:
                shapes.append((shape, device.uuid))
        return shapes
    mode = sharing.mode
    if mode == SharingMode.MPS_WEIGHTED:
        return []
    if mode == SharingMode.MPS:
        replicas = sharing.replicas
        slot = PartitionShape(PartitionKind.MPS, SHARE_MILLI_FULL // replicas, gpu.memory_mib // replicas)
        return [(slot, "")] * replicas
    if mode == SharingMode.TIMESLICE:
        replicas = sharing.replicas
        replica = PartitionShape(PartitionKind.TIMESLICE, SHARE_MILLI_FULL // replicas, gpu.memory_mib)
        return [(replica, "")] * replicas
    return [(PartitionShape(PartitionKind.EXCLUSIVE, SHARE_MILLI_FULL, gpu.memory_mib), "")]


def mig_shape(device: MIGDevice, gpu: GPUDevice, model: GPUModel | None) -> PartitionShape | None:
    """A MIG device's partition shape, or None (logged) when its geometry is impossible."""
    if not (0 <= device.start < MIG_MEMORY_SLICES and 1 <= device.size <= MIG_MEMORY_SLICES - device.start):
        logger.warning(
            "inventory sync: GPU %s reports MIG device %s at start %d size %d, ignored",
            gpu.uuid, device.profile, device.start, device.size,
        )
        return None
    profile = None
    if model is not None:
        try:
            profile = model.mig_profile(device.profile)
        except KeyError:
            profile = None
    if profile is not None:
        compute_slices, memory_mib = profile.compute_slices, profile.memory_mib
        if device.memory_mib is not None:
            memory_mib = device.memory_mib  # what NVML reported for this instance wins over the catalog
    elif device.memory_mib is not None:
        match = _MIG_PROFILE_COMPUTE.match(device.profile)
        compute_slices = int(match.group(1)) if match else device.size
        memory_mib = device.memory_mib
    else:
        # Unknown model or profile: read the compute slices from the name ("3g.40gb") and give
        # the instance its memory slices' share of the board.
        match = _MIG_PROFILE_COMPUTE.match(device.profile)
        compute_slices = int(match.group(1)) if match else device.size
        memory_mib = device.size * gpu.memory_mib // MIG_MEMORY_SLICES
    share_milli = max(1, min(SHARE_MILLI_FULL, compute_slices * SHARE_MILLI_FULL // MIG_COMPUTE_SLICES))
    return PartitionShape(
        kind=PartitionKind.MIG,
        share_milli=share_milli,
        memory_mib=min(memory_mib, gpu.memory_mib),
        mig_profile=device.profile,
        mig_start=device.start,
        mig_size=device.size,
    )


def weighted_shape(
    share_milli: int | None, memory_mib: int | None, gpu_memory_mib: int, replicas: int
) -> PartitionShape:
    """A weighted MPS share from what a pod declares (its annotations; None where it declares nothing).

    Without a share the pod is one of the R time-slicing replicas the device plugin admits, so it
    is counted as 1000 // R; without a memory figure it gets its share's proportion of the GPU
    memory (what CUDA_MPS_PINNED_DEVICE_MEM_LIMIT would be set to).
    """
    if share_milli is None:
        share_milli = SHARE_MILLI_FULL // max(replicas, 1)
    share_milli = max(1, min(SHARE_MILLI_FULL, share_milli))
    if memory_mib is None:
        memory_mib = gpu_memory_mib * share_milli // SHARE_MILLI_FULL
    return PartitionShape(PartitionKind.MPS_WEIGHTED, share_milli, max(0, min(memory_mib, gpu_memory_mib)))
