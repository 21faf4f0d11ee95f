"""The devices a pod holds, read from its resource requests and gpuplane's annotations."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from nodes.cluster.base import ClusterPod
from nodes.contract import (
    ANNOTATION_ASSIGNED_GPUS,
    ANNOTATION_MIG_START,
    ANNOTATION_SHARING,
    LABEL_MANAGED_BY,
    MANAGED_BY_GPUPLANE,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
    SHARING_DEFAULT_SCHEDULER,
)
from nodes.inventory.shapes import PartitionShape
from nodes.vocabulary import PartitionKind

logger = logging.getLogger(__name__)

# A pod holds its devices once bound (Pending with a node) or running; Succeeded/Failed pods
# have released them.
HOLDING_PHASES = frozenset({"Pending", "Running"})


@dataclass(frozen=True)
class PodDevice:
    """One device a pod holds: a full-GPU resource unit or one MIG instance."""

    pod: ClusterPod
    mig_profile: str | None  # None: nvidia.com/gpu
    gpu_index: int | None  # from gpuplane.io/gpus, when given
    mig_start: int | None  # from gpuplane.io/mig-start, when given

    @property
    def pinned(self) -> bool:
        """True when an annotation pins it to one GPU or one MIG start."""
        return self.gpu_index is not None or self.mig_start is not None

    def accepts(self, gpu_index: int, shape: PartitionShape) -> bool:
        """Whether a partition of this shape on this GPU can be the device."""
        if self.gpu_index is not None and gpu_index != self.gpu_index:
            return False
        if self.mig_profile is None:
            return shape.kind != PartitionKind.MIG
        return (
            shape.kind == PartitionKind.MIG
            and shape.mig_profile == self.mig_profile
            and (self.mig_start is None or shape.mig_start == self.mig_start)
        )

    def describe(self) -> str:
        """For log lines: "MIG 3g.40gb on GPU 1 at start 4", "a GPU"."""
        what = f"MIG {self.mig_profile}" if self.mig_profile else "a GPU"
        if self.gpu_index is not None:
            what += f" on GPU {self.gpu_index}"
        if self.mig_start is not None:
            what += f" at start {self.mig_start}"
        return what


def counts_as_others(pod: ClusterPod) -> bool:
    """Whether the pod's CPU and memory requests count as what *others* hold on its node: every
    bound, unfinished pod but gpuplane's own placed ones, whose requests their placements hold
    (a gpuplane pod handed to the default scheduler is placed by Kubernetes: it counts here)."""
    if pod.phase not in HOLDING_PHASES or not pod.node_name:
        return False
    ours = pod.labels.get(LABEL_MANAGED_BY) == MANAGED_BY_GPUPLANE
    return not ours or pod.annotations.get(ANNOTATION_SHARING) == SHARING_DEFAULT_SCHEDULER


def requested_by_others(pods: Iterable[ClusterPod]) -> dict[str, tuple[int, int]]:
    """Per node name: the CPU (milli) and memory (MiB) that pods gpuplane did not place request."""
    totals: dict[str, tuple[int, int]] = {}
    for pod in pods:
        if counts_as_others(pod):
            cpu, memory = totals.get(pod.node_name, (0, 0))
            totals[pod.node_name] = (cpu + pod.cpu_request_milli, memory + pod.memory_request_mib)
    return totals


def pod_devices(pod: ClusterPod) -> list[PodDevice]:
    """The devices a pod holds, each with the GPU index / MIG start its annotations pin it to."""
    indexes = _annotation_indexes(pod)
    mig_start = annotation_int(pod, ANNOTATION_MIG_START)
    devices: list[PodDevice] = []
    for resource, count in sorted(pod.gpu_requests.items()):
        if resource == RESOURCE_GPU:
            profile = None
        elif resource.startswith(RESOURCE_MIG_PREFIX):
            profile = resource[len(RESOURCE_MIG_PREFIX):]
        else:
            continue
        for position in range(count):
            devices.append(
                PodDevice(
                    pod=pod,
                    mig_profile=profile,
                    gpu_index=indexes[position] if position < len(indexes) else None,
                    # One start annotation cannot pin several instances; it pins a single one.
                    mig_start=mig_start if profile is not None and count == 1 else None,
                )
            )
    return devices


def pinned_first(devices: list[PodDevice]) -> list[PodDevice]:
    """Devices pinned by annotation (GPU index or MIG start) before free-floating ones, so that a
    pod that may go anywhere never takes the one partition a pinned pod must have."""
    return sorted(devices, key=lambda device: not device.pinned)


def annotation_int(pod: ClusterPod, key: str) -> int | None:
    """The pod's annotation `key` as an integer; None (a malformed value logged) when it has none."""
    raw = pod.annotations.get(key)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        logger.warning("inventory sync: pod %s has a non-integer %s annotation %r", pod.key, key, raw)
        return None


def _annotation_indexes(pod: ClusterPod) -> list[int]:
    raw = pod.annotations.get(ANNOTATION_ASSIGNED_GPUS, "")
    try:
        return [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        logger.warning(
            "inventory sync: pod %s has a malformed %s annotation %r", pod.key, ANNOTATION_ASSIGNED_GPUS, raw
        )
        return []
