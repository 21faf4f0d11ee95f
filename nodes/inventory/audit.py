"""The audit events of inventory sync: what changed in the inventory, told as `AuditEntry`s.

The passes collect entries in `SyncPlan.audit` while they write; `sync_inventory` stores them all
with one INSERT at the end of its transaction, and none when nothing changed. Only changes are
events: heartbeats, allocation counters and which pod uses which partition are not (they move with
every pod and are shown by the pages as they are).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db.models import Q

from lifecycle.audit import SYSTEM_INVENTORY_SYNC, AuditEntry, object_type_of
from lifecycle.models import AuditEvent
from nodes.models import GPU, Node

NODE_CREATED = "node.created"
NODE_UPDATED = "node.updated"
NODE_SHARING_CHANGED = "node.sharing_changed"
NODE_DELETED = "node.deleted"
NODE_KEPT = "node.kept"
GPU_CREATED = "gpu.created"
GPU_DELETED = "gpu.deleted"

ACTOR = SYSTEM_INVENTORY_SYNC
# A change of these is told as NODE_SHARING_CHANGED, apart from the node's other fields.
SHARING_FIELDS = ("sharing_mode", "sharing_replicas", "applied_config")
# What a NODE_CREATED event records of the new node (its labels are on the node's page).
_CREATED_SUMMARY = ("gpu_product", "gpu_count", "sharing_mode", "sharing_replicas", "ready", "cordoned")


def node_created(node: Node) -> AuditEntry:
    """A node found on the cluster for the first time (its row has its id)."""
    return AuditEntry(
        NODE_CREATED, node, actor=ACTOR, reason="found on the cluster",
        after={name: getattr(node, name) for name in _CREATED_SUMMARY},
    )


def node_changed(node: Node, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[AuditEntry]:
    """The events of an updated node, from the values of its changed fields before and after:
    NODE_SHARING_CHANGED for the sharing fields, NODE_UPDATED for the others (labels as the
    keys that changed, were added or were removed, not the whole map)."""
    entries = []
    sharing = [name for name in before if name in SHARING_FIELDS]
    if sharing:
        entries.append(AuditEntry(
            NODE_SHARING_CHANGED, node, actor=ACTOR,
            before={name: before[name] for name in sharing}, after={name: after[name] for name in sharing},
        ))
    others = [name for name in before if name not in SHARING_FIELDS]
    if others:
        old = {name: before[name] for name in others}
        new = {name: after[name] for name in others}
        if "labels" in old:
            old["labels"], new["labels"] = _changed_labels(old["labels"], new["labels"])
        entries.append(AuditEntry(NODE_UPDATED, node, actor=ACTOR, before=old, after=new))
    return entries


def node_deleted(node: Node) -> AuditEntry:
    """A node gone from the cluster, deleted with its GPUs and partitions."""
    return AuditEntry(NODE_DELETED, ("nodes.node", node.pk), actor=ACTOR, reason="gone from the cluster",
                      object_repr=node.name)


def node_kept(node: Node) -> AuditEntry:
    """A node gone from the cluster but kept (and marked not ready) because a holder refers to it."""
    return AuditEntry(
        NODE_KEPT, node, actor=ACTOR, reason="gone from the cluster; kept while a holder refers to it",
        before={"ready": True}, after={"ready": False},
    )


def gpu_created(gpu: GPU, node_name: str) -> AuditEntry:
    """A GPU reported for the first time (its row has its id)."""
    return AuditEntry(
        GPU_CREATED, gpu, actor=ACTOR, reason="found on the cluster", object_repr=_gpu_repr(node_name, gpu.index),
        after={"uuid": gpu.uuid, "model": gpu.model, "memory_mib": gpu.memory_mib, "mig_enabled": gpu.mig_enabled},
    )


def gpu_deleted(gpu: GPU, node_name: str) -> AuditEntry:
    """A GPU no longer reported (alone, or with its node), deleted with its partitions."""
    return AuditEntry(
        GPU_DELETED, ("nodes.gpu", gpu.pk), actor=ACTOR, reason="gone from the cluster",
        object_repr=_gpu_repr(node_name, gpu.index), before={"uuid": gpu.uuid},
    )


def _gpu_repr(node_name: str, index: int) -> str:
    # What str(GPU) says, without the query for its node that str() would make.
    return f"{node_name}/gpu{index}"


def _changed_labels(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    keys = {key for key in old.keys() | new.keys() if old.get(key) != new.get(key)}
    return {k: old[k] for k in sorted(keys) if k in old}, {k: new[k] for k in sorted(keys) if k in new}


def node_events(node: Node, gpu_ids: Iterable[int], limit: int = 50) -> list[AuditEvent]:
    """The audit trail of a node and of its GPUs ``gpu_ids`` (those it has now), newest first; one query."""
    gpu_keys = [str(pk) for pk in gpu_ids]
    about = Q(object_type=object_type_of(Node), object_id=str(node.pk)) | Q(
        object_type=object_type_of(GPU), object_id__in=gpu_keys)
    return list(AuditEvent.objects.filter(about)[:limit])
