"""A node row's sharing configs as values: the applied one (what the cluster proves) and the desired one.

``applied_config`` is derived, never stored: the mode and R that inventory sync read from the
node's GFD labels (``nvidia.com/gpu.sharing-strategy``, ``nvidia.com/gpu.replicas``, gpuplane's
weighted-MPS marker) and, on MIG nodes, the MIG instances found on each GPU. ``desired_config``
is what gpuplane wants (a rollout's target); it changes only through ``set_desired_config``, which
validates it for the node's GPU model before touching the row, and records the change.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction
from django.db.models import Prefetch, QuerySet

from lifecycle.audit import record
from nodes.catalog import CATALOG
from nodes.models import GPU, Node, Partition
from nodes.sharing.node_config import (
    NodeConfig,
    applied_node_config,
    device_plugin_config_name,
    mig_config_name,
    parse_node_config,
)
from nodes.vocabulary import PartitionKind, SharingMode

NODE_DESIRED_CONFIG_SET = "node.desired_config_set"
NODE_DESIRED_CONFIG_CLEARED = "node.desired_config_cleared"

# Where with_mig_layouts() puts a node's MIG-enabled GPUs (their MIG partitions prefetched).
_MIG_GPUS_ATTR = "mig_gpus_prefetched"


def with_mig_layouts(nodes: QuerySet[Node]) -> QuerySet[Node]:
    """Prefetch what ``applied_config`` reads of MIG nodes, so a page of nodes costs two more queries, not N."""
    mig_partitions = Partition.objects.filter(kind=PartitionKind.MIG).only("gpu_id", "mig_profile")
    gpus = GPU.objects.filter(mig_enabled=True).prefetch_related(Prefetch("partitions", queryset=mig_partitions))
    return nodes.prefetch_related(Prefetch("gpus", queryset=gpus, to_attr=_MIG_GPUS_ATTR))


def applied_config(node: Node, gpu_layouts: Iterable[Mapping[str, int]] | None = None) -> NodeConfig:
    """The config the cluster proves on ``node`` (see the module docstring). A page that has loaded
    the node's MIG instances passes their counts per GPU as ``gpu_layouts``, saving the query."""
    if node.sharing_mode != SharingMode.MIG:
        return applied_node_config(node.sharing_mode, node.sharing_replicas)
    return applied_node_config(node.sharing_mode, node.sharing_replicas, gpu_layouts if gpu_layouts is not None else _gpu_layouts(node))


def desired_config(node: Node) -> NodeConfig | None:
    """The config gpuplane wants on ``node``, or None when it wants nothing in particular."""
    data = node.desired_config
    if not data:
        return None
    return NodeConfig.of(data["mode"], data.get("replicas"), data.get("mig_layout"))


def config_pending(node: Node, applied: NodeConfig | None = None) -> bool:
    """True when gpuplane wants a config the node does not run yet (``applied``: when already known)."""
    desired = desired_config(node)
    return desired is not None and desired != (applied if applied is not None else applied_config(node))


def desired_label_value(node: Node) -> str:
    """The label value the desired config selects: the mig-parted config on MIG, else the device-plugin
    config ("" when nothing is desired), comparable with ``Node.applied_config``."""
    desired = desired_config(node)
    if desired is None:
        return ""
    return mig_config_name(desired) if desired.mode == SharingMode.MIG else device_plugin_config_name(desired)


def validate_for_node(node: Node, data: Any) -> NodeConfig:
    """``parse_node_config`` for this node's GPU model (any model when the node's is unknown)."""
    model = CATALOG.get(node.gpu_model)
    return parse_node_config(data, model=model)


def set_desired_config(node: Node, data: Any, *, actor: Any = None, reason: str = "") -> NodeConfig | None:
    """Validate ``data`` (the API shape, or None to clear) for ``node`` and store it as its desired config.

    Raises ``InvalidNodeConfig`` (with the field and NVIDIA's or the MIG planner's reason) before
    anything is written. Records ``node.desired_config_set`` / ``_cleared`` with before and after;
    storing the value the node already has records nothing.
    """
    config = None if data is None else validate_for_node(node, data)
    value = config.as_dict() if config is not None else None
    with transaction.atomic():
        locked = Node.objects.select_for_update().get(pk=node.pk)
        before = locked.desired_config
        if before == value:
            return config
        Node.objects.filter(pk=node.pk).update(desired_config=value)
        record(
            NODE_DESIRED_CONFIG_SET if value is not None else NODE_DESIRED_CONFIG_CLEARED, locked, actor=actor,
            reason=reason, before={"desired_config": before}, after={"desired_config": value},
        )
    node.desired_config = value
    return config


def _gpu_layouts(node: Node) -> list[Counter[str]]:
    if hasattr(node, _MIG_GPUS_ATTR):
        return [Counter(p.mig_profile for p in gpu.partitions.all()) for gpu in getattr(node, _MIG_GPUS_ATTR)]
    # One query, whatever the node's page has prefetched already.
    layouts: dict[int, Counter[str]] = {}
    rows = Partition.objects.filter(gpu__node=node, gpu__mig_enabled=True, kind=PartitionKind.MIG)
    for gpu_id, profile in rows.values_list("gpu_id", "mig_profile"):
        layouts.setdefault(gpu_id, Counter())[profile] += 1
    return list(layouts.values())
