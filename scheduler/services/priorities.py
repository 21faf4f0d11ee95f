"""The PriorityClasses ``gpuplane-<priority>`` in the cluster, as the admins' PriorityLevel rows say.

API deploys and webhook-placed pods name them (``scheduler.workloads``, the pod's own
``priorityClassName``); ``sync_priority_classes`` creates them, or replaces one whose value or
preemption policy an admin changed. deploy/base/priorityclasses.yaml installs seed 002's defaults,
so a cluster has them before gpuplane first runs.
"""
from __future__ import annotations

import logging
from typing import Any

from lifecycle.audit import record
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError
from nodes.contract import PRIORITY_CLASS_PREFIX
from scheduler.models import PriorityLevel

logger = logging.getLogger(__name__)

# Seed 002's PriorityClasses (as migration 0013 first stored them): priority, value, description.
DEFAULT_LEVELS = (("high", 1000, "production inference"), ("medium", 500, "training"), ("low", 100, "research"))


def ensure_default_levels() -> int:
    """Store each default level that has no row (after every migrate and ``flush``, as Django does
    for permissions): an admin's changed values are kept. How many were created."""
    created = 0
    for priority, value, description in DEFAULT_LEVELS:
        created += PriorityLevel.objects.get_or_create(
            priority=priority, defaults={"value": value, "description": description, "preempts": priority != "low"})[1]
    return created


def priority_class_name(priority: str) -> str:
    return f"{PRIORITY_CLASS_PREFIX}{priority}"


def sync_priority_classes(*, cluster: ClusterBackend | None = None, actor: Any = None) -> list[str]:
    """Make every PriorityLevel's PriorityClass match it; return the names changed (each audited).
    ``ClusterError`` propagates (the rows stay as they are; the next sync tries again)."""
    backend = cluster if cluster is not None else get_cluster()
    changed = []
    for level in PriorityLevel.objects.order_by("-value"):
        name = priority_class_name(level.priority)
        description = f"gpuplane workloads of priority {level.priority}" + (
            f" ({level.description})" if level.description else "")
        if backend.ensure_priority_class(name, level.value, description, preempts=level.preempts):
            record("priority_class.synced", level, actor=actor,
                   after={"name": name, "value": level.value, "preempts": level.preempts})
            changed.append(name)
    return changed


def sync_priority_classes_if_reachable(*, actor: Any = None) -> bool:
    """After an admin's change: the row is the truth; a cluster that cannot be reached now gets the
    PriorityClasses at the next sync. Whether they were written now."""
    try:
        sync_priority_classes(actor=actor)
    except ClusterError:
        logger.warning("could not sync the PriorityClasses to the cluster", exc_info=True)
        return False
    return True
