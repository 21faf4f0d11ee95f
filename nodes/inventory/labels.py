"""A node's sharing state, read from the labels NVIDIA's components (and gpuplane) put on it."""
from __future__ import annotations

from dataclasses import dataclass

from nodes.cluster.base import ClusterNode
from nodes.contract import (
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_REPLICAS,
    LABEL_MIG_CONFIG,
    LABEL_SHARING_MODE,
    LABEL_SHARING_STRATEGY,
    SHARING_MODE_LABEL_WEIGHTED,
    STRATEGY_MPS,
    STRATEGY_TIME_SLICING,
)
from nodes.vocabulary import SharingMode


@dataclass(frozen=True)
class NodeSharing:
    """How a node's GPUs are shared, as read from its labels and MIG devices."""

    mode: str  # a SharingMode value
    replicas: int  # R for mps / timeslice / mps-weighted, else 1
    applied_config: str  # device-plugin config name, or the mig-parted config name on MIG nodes


def node_sharing(node: ClusterNode) -> NodeSharing:
    """Derive the node's sharing mode from what the NVIDIA components report.

    MIG wins over the device-plugin sharing labels: the plugin's MPS never runs on MIG devices and
    its time-slicing only replicates the full GPUs of a MIG node, which the inventory models as
    exclusive partitions of the non-MIG GPUs. Then gpuplane's own `gpuplane.io/sharing-mode=
    mps-weighted` (set on top of a time-slicing config), then GFD's sharing strategy.
    """
    labels = node.labels
    if any(gpu.mig_enabled for gpu in node.gpus):
        return NodeSharing(SharingMode.MIG, 1, labels.get(LABEL_MIG_CONFIG, ""))
    applied = labels.get(LABEL_DEVICE_PLUGIN_CONFIG, "")
    replicas = _positive_int(labels.get(LABEL_GPU_REPLICAS), default=1)
    strategy = labels.get(LABEL_SHARING_STRATEGY, "none")
    if labels.get(LABEL_SHARING_MODE) == SHARING_MODE_LABEL_WEIGHTED:
        return NodeSharing(SharingMode.MPS_WEIGHTED, replicas, applied)
    if strategy == STRATEGY_MPS:
        return NodeSharing(SharingMode.MPS, replicas, applied)
    if strategy == STRATEGY_TIME_SLICING:
        return NodeSharing(SharingMode.TIMESLICE, replicas, applied)
    return NodeSharing(SharingMode.EXCLUSIVE, 1, applied)


def _positive_int(raw: str | None, *, default: int) -> int:
    try:
        value = int(raw) if raw is not None else default
    except ValueError:
        return default
    return max(1, value)
