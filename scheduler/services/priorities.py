"""The PriorityClasses ``gpuplane-<priority>`` in the cluster, as the admins' PriorityLevel rows say.

API deploys and webhook-placed pods name them (``scheduler.workloads``, the pod's own
``priorityClassName``); ``sync_priority_classes`` creates them, or replaces one whose value or
preemption policy an admin changed. deploy/base/priorityclasses.yaml installs seed 002's defaults,
so a cluster has them before gpuplane first runs.
"""
from __future__ import annotations

from typing import Any

from lifecycle.audit import record
from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend
from nodes.contract import PRIORITY_CLASS_PREFIX
from scheduler.models import PriorityLevel


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
