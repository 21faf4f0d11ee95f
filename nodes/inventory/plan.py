"""The working state of one inventory sync: the rows as loaded, and the rows as they should be.

`SyncPlan` is built once per sync (`nodes.inventory.sync`) and handed to each pass in turn:
nodes (`node_rows`), GPUs and partitions (`gpu_rows`), pods (`binding`), then the writes.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lifecycle.audit import AuditEntry
from nodes.catalog import GPUModel
from nodes.cluster.base import ClusterNode, ClusterPod
from nodes.holds import Hold
from nodes.inventory.labels import NodeSharing
from nodes.inventory.report import SyncReport
from nodes.inventory.shapes import PartitionShape
from nodes.models import GPU, Node, Partition


@dataclass
class PartitionSlot:
    """A partition as the sync plans it: an existing row to keep, or one to create."""

    gpu_uuid: str
    gpu_index: int
    slot: int
    shape: PartitionShape
    mig_device_uuid: str = ""
    row: Partition | None = None
    held: bool = False  # a holder has it: left exactly as it is
    old_pod: str = ""
    pod: str = ""
    pod_memory_mib: int | None = None  # timeslice / weighted: memory the occupying pod declared

    @property
    def occupied(self) -> bool:
        """Held, or used by a pod found on the cluster."""
        return self.held or bool(self.pod)

    @property
    def free(self) -> bool:
        """Neither held nor used by a pod."""
        return not self.occupied


@dataclass(frozen=True)
class NodeEntry:
    """A node row that stays after the node pass, with what the cluster says about it."""

    row: Node
    observed: ClusterNode | None  # None: gone from the cluster, kept for its holders
    sharing: NodeSharing | None


@dataclass
class GPUPlan:
    """A GPU as the sync plans it: its row (None when new), the values it should have, its slots."""

    uuid: str
    node: Node
    index: int
    values: dict[str, Any]  # the GPU's own fields; {} for a vanished GPU kept for its holders
    row: GPU | None
    memory_mib: int
    replicas: int = 1
    slots: list[PartitionSlot] = field(default_factory=list)


@dataclass
class SyncPlan:
    """What one sync read (cluster and rows) and what it has decided to write so far."""

    observed: list[ClusterNode]
    pods: list[ClusterPod]
    now: datetime  # the sync's instant: Node.last_seen of every node it sees
    report: SyncReport = field(default_factory=SyncReport)
    node_rows: dict[str, Node] = field(default_factory=dict)  # by name
    gpu_rows: dict[str, GPU] = field(default_factory=dict)  # by UUID
    partitions_by_gpu: dict[int, list[Partition]] = field(default_factory=dict)  # by GPU id, in slot order
    holds: dict[int, Hold] = field(default_factory=dict)  # by partition id
    held_gpu_ids: set[int] = field(default_factory=set)  # GPUs with at least one held partition
    gpu_plans: list[GPUPlan] = field(default_factory=list)
    partitions_to_delete: list[int] = field(default_factory=list)
    model_cache: dict[str, GPUModel | None] = field(default_factory=dict)  # catalog model by product
    audit: list[AuditEntry] = field(default_factory=list)  # events of what was written, stored at the end

    def is_held(self, partition: Partition) -> bool:
        """Whether a holder has this partition."""
        return partition.pk in self.holds


def lowest_unused(used: Iterable[int]) -> int:
    """The smallest non-negative integer not in `used`."""
    taken = set(used)
    slot = 0
    while slot in taken:
        slot += 1
    return slot
