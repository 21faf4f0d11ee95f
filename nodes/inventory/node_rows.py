"""The node pass of inventory sync: Node rows made to match the cluster's nodes.

A node gone from the cluster is deleted with its GPUs and partitions, unless a holder still
refers to it or holds one of its partitions: then it is kept and marked not ready, so that
nothing new is placed there while its holders are released.
"""
from __future__ import annotations

import logging
from typing import Any

from nodes.catalog import GPUModel, UnknownGPUProduct, lookup_product
from nodes.cluster.base import ClusterNode
from nodes.contract import LABEL_GPU_PRODUCT
from nodes.holds import partition_holder
from nodes.inventory import audit
from nodes.inventory.labels import NodeSharing, node_sharing
from nodes.inventory.plan import NodeEntry, SyncPlan
from nodes.inventory.pods import requested_by_others
from nodes.models import Node

logger = logging.getLogger(__name__)

_MISSING_PRODUCT = f"(no {LABEL_GPU_PRODUCT} label)"
# The Node fields that follow the cluster (last_seen moves with them: when the sync last wrote the node).
NODE_FIELDS = [
    "labels",
    "taints",
    "ready",
    "cordoned",
    "cpu_allocatable_milli",
    "memory_allocatable_mib",
    "cpu_requested_milli",
    "memory_requested_mib",
    "gpu_product",
    "gpu_model",
    "gpu_count",
    "sharing_mode",
    "sharing_replicas",
    "applied_config",
]

# Unknown products are reported by every sync but logged once per process: the beat runs the
# sync every 30 s and the same warning each time would drown the log.
_warned_unknown_products: set[str] = set()


def sync_node_rows(plan: SyncPlan) -> dict[str, NodeEntry]:
    """Create/update/delete Node rows; return the rows that stay, by name."""
    to_create: list[Node] = []
    to_update: list[Node] = []
    heartbeats: list[Node] = []  # seen, unchanged: nothing to write
    sharing_by_name: dict[str, NodeSharing] = {}
    # The pods in scope are every pod of the nodes in scope (nodes.inventory.watching).
    requested = requested_by_others(plan.pods)
    for observed in plan.observed:
        sharing = node_sharing(observed)
        sharing_by_name[observed.name] = sharing
        values = _node_values(plan, observed, sharing, requested.get(observed.name, (0, 0)))
        row = plan.node_rows.get(observed.name)
        if row is None:
            to_create.append(Node(name=observed.name, last_seen=plan.now, **values))
            continue
        before = {name: getattr(row, name) for name, value in values.items() if getattr(row, name) != value}
        if before:
            plan.audit.extend(audit.node_changed(row, before, {name: values[name] for name in before}))
            for name, value in values.items():
                setattr(row, name, value)
            row.last_seen = plan.now
            to_update.append(row)
        else:
            heartbeats.append(row)

    observed_names = {node.name for node in plan.observed}
    gone = [row for name, row in plan.node_rows.items() if name not in observed_names]
    in_use = _nodes_in_use(plan, gone)
    to_delete = [row.pk for row in gone if row.pk not in in_use]
    for row in gone:
        # A node a holder refers to is kept (the holder must be released first, which cannot be
        # done for a vanished row); it is marked not ready so that nothing new goes there meanwhile.
        if row.pk in in_use:
            plan.report.gone_nodes_kept.append(row.name)
            if row.ready:
                plan.audit.append(audit.node_kept(row))
                row.ready = False
                to_update.append(row)

    if to_delete:
        _, per_model = Node.objects.filter(pk__in=to_delete).delete()
        plan.report.count_deleted(per_model)
        plan.audit.extend(audit.node_deleted(row) for row in gone if row.pk not in in_use)
    if to_create:
        Node.objects.bulk_create(to_create)
        plan.report.created["nodes"] += len(to_create)
    if to_update:
        Node.objects.bulk_update(to_update, [*NODE_FIELDS, "last_seen"])
        plan.report.updated["nodes"] += len(to_update)
    # Unchanged nodes are not written: a sync of an unchanged cluster writes nothing at all.
    plan.report.heartbeats = len(heartbeats)

    created_names = [node.name for node in to_create if node.pk is None]
    if created_names:  # databases that cannot return ids from a bulk insert
        refreshed = {node.name: node for node in Node.objects.filter(name__in=created_names)}
        to_create = [refreshed.get(node.name, node) for node in to_create]
    plan.audit.extend(audit.node_created(node) for node in to_create)
    rows = {**plan.node_rows, **{node.name: node for node in to_create}}
    observed_by_name = {node.name: node for node in plan.observed}
    return {
        name: NodeEntry(row, observed_by_name.get(name), sharing_by_name.get(name))
        for name, row in rows.items()
        if name in observed_by_name or row.pk in in_use
    }


def catalog_model(plan: SyncPlan, product: str) -> GPUModel | None:
    """The catalog model of a GFD product name, or None (reported once per sync, logged once per
    process) when the catalog does not know it."""
    if product not in plan.model_cache:
        try:
            plan.model_cache[product] = lookup_product(product)
        except UnknownGPUProduct as exc:
            plan.model_cache[product] = None
            if product not in _warned_unknown_products:
                _warned_unknown_products.add(product)
                logger.warning("inventory sync: %s", exc)
    model = plan.model_cache[product]
    shown = product or _MISSING_PRODUCT
    if model is None and shown not in plan.report.unknown_products:
        plan.report.unknown_products.append(shown)
    return model


def node_product(node: ClusterNode) -> str:
    """The node's GPU product: GFD's label, else what its first GPU reports."""
    return node.labels.get(LABEL_GPU_PRODUCT) or node.gpus[0].product


def _nodes_in_use(plan: SyncPlan, gone: list[Node]) -> set[int]:
    """Those of the gone nodes that a holder refers to or holds a partition on."""
    if not gone:
        return set()
    gone_ids = [row.pk for row in gone]
    referred = partition_holder().nodes_in_use(gone_ids)
    with_held_gpus = {gpu.node_id for gpu in plan.gpu_rows.values() if gpu.pk in plan.held_gpu_ids}
    return referred | (with_held_gpus & set(gone_ids))


def _node_values(plan: SyncPlan, node: ClusterNode, sharing: NodeSharing, requested: tuple[int, int]) -> dict[str, Any]:
    product = node_product(node)
    model = catalog_model(plan, product)
    return {
        "cpu_requested_milli": requested[0],
        "memory_requested_mib": requested[1],
        "labels": dict(node.labels),
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in node.taints],
        "ready": node.ready,
        "cordoned": node.unschedulable,
        "cpu_allocatable_milli": node.cpu_allocatable_milli,
        "memory_allocatable_mib": node.memory_allocatable_mib,
        "gpu_product": product,
        "gpu_model": model.key if model else "",
        "gpu_count": len(node.gpus),
        "sharing_mode": sharing.mode,
        "sharing_replicas": sharing.replicas,
        "applied_config": sharing.applied_config,
    }
