"""Inventory sync: what the cluster backend reports -> Node, GPU and Partition rows.

`sync_inventory` is the only writer of inventory facts (labels, readiness, GPUs, MIG devices,
which pod uses which partition). Holders (the scheduler's placements, asked through
`nodes.holds`) own the partitions they hold: sync never writes a held partition and never
deletes a partition, GPU or node that a holder still holds or refers to.

The cluster is read *before* the transaction opens, so no row lock is ever held across cluster
I/O; the database part then runs in one transaction that locks the GPU rows (in primary-key
order, like every other writer should) for the few milliseconds it takes to recompute and write
the allocation counters, so a concurrent reservation cannot be lost between our read and write.

Every row is compared with what it should be and only differences are written, so a sync of an
unchanged cluster issues no INSERT or DELETE and one UPDATE: Node.last_seen of every node it saw
(the heartbeat, so pages can say a node was seen at the last sync). What it does change is told in the
audit trail (`nodes.inventory.audit`), recorded in the same transaction with one INSERT.
"""
from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from lifecycle.audit import record_many
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterNode, ClusterPod
from nodes.holds import partition_holder
from nodes.inventory.binding import bind_pods
from nodes.inventory.gpu_rows import plan_gpu_rows, write_gpu_rows, write_partition_rows
from nodes.inventory.node_rows import sync_node_rows
from nodes.inventory.plan import SyncPlan
from nodes.inventory.report import SyncReport
from nodes.models import GPU, Node, Partition


def sync_inventory(cluster: ClusterBackend | None = None) -> SyncReport:
    """Make Node, GPU and Partition rows match the cluster; return what was written.

    Idempotent: a second run against an unchanged cluster writes nothing but the heartbeat. Reads the cluster
    first (outside any transaction), then writes in one transaction. Never raises for an unknown
    GPU product (reported in `unknown_products`) or a pod that fits no partition (reported in
    `unplaced_pods`); ClusterError from the backend propagates before anything is written.
    """
    backend = cluster if cluster is not None else get_cluster()
    # Nodes without GPUs (CPU workers, control plane) are not inventory gpuplane places onto.
    observed = [node for node in backend.list_nodes() if node.gpus]
    pods = backend.list_gpu_pods()
    now = timezone.now()
    with transaction.atomic():
        plan = _load(observed, pods, now)
        nodes = sync_node_rows(plan)
        plan_gpu_rows(plan, nodes)
        bind_pods(plan, nodes)
        write_gpu_rows(plan)
        write_partition_rows(plan)
        record_many(plan.audit, at=now)  # one INSERT, none when nothing changed
    plan.report.unknown_products.sort()
    plan.report.unplaced_pods.sort()
    return plan.report


def _load(observed: list[ClusterNode], pods: list[ClusterPod], now: datetime) -> SyncPlan:
    """The rows as they are, and what holders hold, read inside the sync's transaction."""
    plan = SyncPlan(observed=observed, pods=pods, now=now)
    plan.node_rows = {node.name: node for node in Node.objects.all()}
    # Locked for the rest of this (short, I/O-free) transaction: reservations that update
    # GPU.allocated_* wait for us instead of being overwritten by our recomputed totals.
    plan.gpu_rows = {gpu.uuid: gpu for gpu in GPU.objects.select_for_update().order_by("pk")}
    for partition in Partition.objects.order_by("gpu_id", "slot"):
        plan.partitions_by_gpu.setdefault(partition.gpu_id, []).append(partition)
    plan.holds = {hold.partition_id: hold for hold in partition_holder().holds()}
    plan.held_gpu_ids = {hold.gpu_id for hold in plan.holds.values()}
    return plan


__all__ = ["sync_inventory"]
