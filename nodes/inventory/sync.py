"""Inventory sync: what the cluster backend reports -> Node, GPU and Partition rows.

`sync_inventory` is the only writer of inventory facts (labels, readiness, GPUs, MIG devices,
which pod uses which partition). Holders (the scheduler's placements, asked through
`nodes.holds`) own the partitions they hold: sync never writes a held partition and never
deletes a partition, GPU or node that a holder still holds or refers to.

The cluster is read *before* the transaction opens, so no row lock is ever held across cluster
I/O; the database part then runs in one transaction that locks the GPU rows (in primary-key
order, like every other writer should) for the few milliseconds it takes to recompute and write
the allocation counters, so a concurrent reservation cannot be lost between our read and write.

Only the nodes that changed on the cluster (or whose pods did) are read and compared, where the
backend can watch (`nodes.inventory.watching`); every row read is compared with what it should be
and only differences are written, so a sync of an unchanged cluster writes nothing (Node.last_seen
moves when the sync writes the node). What it does change is told in the audit trail
(`nodes.inventory.audit`), recorded in the same transaction with one INSERT.
"""
from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from lifecycle.audit import record_many
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend
from nodes.holds import partition_holder
from nodes.inventory.agent_overlay import load_reports, mark_applied, overlay, pending_report_nodes
from nodes.inventory.binding import bind_pods
from nodes.inventory.gpu_rows import plan_gpu_rows, write_gpu_rows, write_partition_rows
from nodes.inventory.node_rows import sync_node_rows
from nodes.inventory.plan import SyncPlan
from nodes.inventory.report import SyncReport
from nodes.inventory.watching import ClusterReading, read_cluster, remember, widen
from nodes.models import GPU, Node, Partition


def sync_inventory(cluster: ClusterBackend | None = None, *, relist: bool = False) -> SyncReport:
    """Make Node, GPU and Partition rows match the cluster; return what was written.

    Reads what changed since the last sync where the backend can watch (`nodes.inventory.watching`;
    everything when `relist`, the first time, or on 410 Gone) and syncs only the nodes concerned,
    and those whose node agent sent a GPU report no sync has applied yet; each node's report is
    laid over what the cluster says of it (`nodes.inventory.agent_overlay`: the report decides
    GPU UUIDs and MIG instances, the cluster the rest). An unchanged cluster costs two empty
    watches and two queries, and writes nothing. Reads the
    cluster first (outside any transaction), then writes in one transaction. Never raises for an
    unknown GPU product (reported in `unknown_products`) or a pod that fits no partition (reported
    in `unplaced_pods`); ClusterError from the backend propagates before anything is written.
    """
    backend = cluster if cluster is not None else get_cluster()
    reading = read_cluster(backend, relist=relist)
    widen(reading, pending_report_nodes())  # nodes whose agent reported something new
    report = SyncReport(mode=reading.mode, events=reading.events)
    if reading.nothing_to_do:
        remember(reading)  # the versions did not move (a catch-up's mirror takes the stored ones)
        return report
    now = timezone.now()
    with transaction.atomic():
        if reading.scope != set():  # an empty scope: only objects gpuplane does not track changed
            reports = load_reports(None if reading.scope is None else reading.scope)
            reading.observed = overlay(reading.observed, reports)
            plan = _load(reading, now)
            plan.report = report
            nodes = sync_node_rows(plan)
            plan_gpu_rows(plan, nodes)
            bind_pods(plan, nodes)
            write_gpu_rows(plan)
            write_partition_rows(plan)
            record_many(plan.audit, at=now)  # one INSERT, none when nothing changed
            mark_applied(reports)
        remember(reading)
    report.unknown_products.sort()
    report.unplaced_pods.sort()
    return report


def _load(reading: ClusterReading, now: datetime) -> SyncPlan:
    """The rows as they are (of the nodes in scope), and what holders hold, read inside the sync's transaction."""
    plan = SyncPlan(observed=reading.observed, pods=reading.pods, now=now)
    nodes = Node.objects.all()
    gpus = GPU.objects.all()
    if reading.scope is not None:
        nodes = nodes.filter(name__in=reading.scope)
        # A GPU is matched by UUID wherever its row is, as in a full sync.
        uuids = [device.uuid for node in reading.observed for device in node.gpus]
        gpus = gpus.filter(Q(node__name__in=reading.scope) | Q(uuid__in=uuids))
    plan.node_rows = {node.name: node for node in nodes}
    # Locked for the rest of this (short, I/O-free) transaction: reservations that update
    # GPU.allocated_* wait for us instead of being overwritten by our recomputed totals.
    plan.gpu_rows = {gpu.uuid: gpu for gpu in gpus.select_for_update().order_by("pk")}
    partitions = Partition.objects.order_by("gpu_id", "slot")
    if reading.scope is not None:
        partitions = partitions.filter(gpu_id__in=[gpu.pk for gpu in plan.gpu_rows.values()])
    for partition in partitions:
        plan.partitions_by_gpu.setdefault(partition.gpu_id, []).append(partition)
    plan.holds = {hold.partition_id: hold for hold in partition_holder().holds()}
    plan.held_gpu_ids = {hold.gpu_id for hold in plan.holds.values()}
    return plan


__all__ = ["sync_inventory"]
