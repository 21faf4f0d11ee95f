"""A deployment as OME InferenceServices (ome.io/v1beta1): one per workload it runs, pinned like them.

``inference_services`` renders ``scheduler.workloads.inference_service_manifest`` for each
workload group of the deployment's live replicas: required node affinity on kubernetes.io/hostname
of the chosen node (none where GPU selection was skipped or the replica was handed to the default
scheduler), the GPUs its placement holds (the request's tensor-parallel size), MPS env, priority
class, labels and decision annotations. Nothing is created on the cluster.
"""
from __future__ import annotations

import re
from typing import Any

from scheduler.models import Deployment, Placement
from scheduler.services.execution import ACTIVE_PLACEMENT_STATUSES
from scheduler.workloads import inference_service_manifest, workload_specs

_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def base_model_name(model: str) -> str:
    """An OME BaseModel name from a model name ("Qwen/Qwen1.5-32B-Chat" -> "qwen-qwen1-5-32b-chat")."""
    return _NOT_DNS.sub("-", model.lower()).strip("-")[:63].strip("-") or "model"


def inference_services(deployment: Deployment, *, runtime: str = "") -> list[dict[str, Any]]:
    placements = list(Placement.objects.filter(deployment=deployment, status__in=ACTIVE_PLACEMENT_STATUSES)
                      .select_related("node").order_by("replica_index"))
    decisions = dict(deployment.decisions.values_list("replica_index", "pk"))
    return [inference_service_manifest(spec, base_model_name(deployment.model), runtime)
            for spec in workload_specs(deployment, placements, decisions)]
