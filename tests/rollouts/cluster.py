"""Inventory rows for rollout tests: nodes with gpuplane replicas on them, counters and partition holds set as
claims set them (the preview asks the placement engine, which reads the holds)."""
from __future__ import annotations

from typing import Any

from nodes.models import GPU, Node, Partition
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment, Placement
from tests.nodes.factories import hold_partition, make_node


def nodes(*names: str, gpu_model: str = "H100-SXM5-80GB", gpu_count: int = 2, **fields: Any) -> list[Node]:
    return [make_node(name, gpu_model, gpu_count, **fields) for name in names]


def replica(node: Node, name: str, *, share_milli: int = 1000, gpus: int = 1, labels: dict[str, str] | None = None,
            namespace: str = "default") -> Placement:
    """A running deployment with one replica on ``node`` holding ``share_milli`` on each of ``gpus`` GPUs (and
    each GPU's first free partition, when it has one)."""
    deployment = Deployment.objects.create(name=name, model="m", memory_mib=1024, namespace=namespace, gpu_count=gpus,
                                           status=DeploymentStatus.RUNNING, labels=labels or {})
    indexes = list(range(gpus))
    placement = Placement.objects.create(deployment=deployment, node=node, status=PlacementStatus.RUNNING,
                                         workload_name=name, gpu_indexes=indexes, share_milli=share_milli)
    for gpu in GPU.objects.filter(node=node, index__in=indexes):
        gpu.allocated_milli += share_milli
        gpu.save(update_fields=["allocated_milli"])
        free = Partition.objects.filter(gpu=gpu, hold__isnull=True).order_by("slot").first()
        if free is not None:
            hold_partition(free, placement)
    return placement
