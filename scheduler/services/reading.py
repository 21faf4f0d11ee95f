"""What pages and the API show of placements (read-only)."""
from __future__ import annotations

from typing import Any

from django.db.models import Q

from lifecycle.models import AuditEvent
from nodes.figures import gpu_equivalent
from nodes.vocabulary import MIB_PER_GB
from scheduler.choices import DecisionOutcome
from scheduler.models import Deployment, Placement


def placement_summary(placement: Placement) -> dict[str, Any]:
    """What the API and the UI show of a placement.

    ``{"node", "gpu_model", "gpus", "sharing", "share_percent", "memory_gb", "mig_profile"}``:
    ``node`` and ``gpu_model`` are None and ``sharing`` is "default-scheduler" for a replica
    handed to the default Kubernetes scheduler; ``share_percent`` is the compute share per GPU
    (100.0 whole; a MIG instance its compute slices of 7), rounded, not truncated, to one decimal as
    every page shows it (2g = 2/7 = 28.6, not the stored 285 thousandths' 28.5); ``memory_gb`` the GPU memory given per GPU (1 GB = 1024 MiB); ``mig_profile``
    the MIG instance given ("" for other kinds).
    """
    if placement.node_id is None:
        return {"node": None, "gpu_model": None, "gpus": [], "sharing": DecisionOutcome.DEFAULT_SCHEDULER.value,
                "share_percent": None, "memory_gb": None, "mig_profile": ""}
    node = placement.node
    return {
        "node": node.name,
        "gpu_model": node.gpu_model or None,
        "gpus": list(placement.gpu_indexes or []),
        "sharing": placement.sharing,
        "share_percent": round(float(gpu_equivalent(placement.sharing, placement.share_milli, placement.mig_profile)) * 100, 1),
        "memory_gb": round(placement.memory_mib / MIB_PER_GB, 2),
        "mig_profile": placement.mig_profile,
    }


def deployment_events(deployment: Deployment, limit: int = 50) -> list[AuditEvent]:
    """The audit trail of a deployment and of its placements, newest first."""
    placement_ids = [str(pk) for pk in deployment.placements.values_list("pk", flat=True)]
    about = Q(object_type="scheduler.deployment", object_id=str(deployment.pk)) | Q(
        object_type="scheduler.placement", object_id__in=placement_ids)
    return list(AuditEvent.objects.filter(about)[:limit])
