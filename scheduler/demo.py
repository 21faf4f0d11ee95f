"""The demo's gpuplane deployments: three small inference servers, each alone on a GPU of a100-node-2.

The demo cluster (``nodes.demo``) holds only pods gpuplane did not place. These three are
gpuplane's own (25 % MPS slots on the MPS R=4 node), and they show what consolidation is for:
they were placed while batch pods filled every other slot of that node, so each got a GPU of its
own; the batch has finished since, and three GPUs now run one quarter-GPU server each. The
consolidation analysis packs them into the free slots of GPUs already in use and frees three GPUs.

The batch is played by pods run and then deleted on the simulated cluster; the deployments go
through the ordinary deploy pipeline (limited to that node), with its decisions and audit events.
``load_demo_deployments`` is what ``manage.py load_demo_deployments`` (``make run``) runs.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.conf import settings

from nodes.cluster.sim import SimulatedCluster
from nodes.contract import RESOURCE_GPU
from nodes.holds import free_partition_filter
from nodes.inventory.sync import sync_inventory
from nodes.models import Partition
from scheduler.models import Deployment
from scheduler.services import DeploySpec
from scheduler.services.deploy import deploy

DEMO_NODE = "a100-node-2"  # MPS R=4, 8 A100s; the demo's own pods hold slots of GPUs 0 and 1
DEMO_NAMESPACE = "inference"
BATCH_NAMESPACE = "batch"


@dataclass(frozen=True)
class DemoDeployment:
    name: str
    model: str
    gpu: int  # the GPU of DEMO_NODE it ends up alone on


DEMO_DEPLOYMENTS: tuple[DemoDeployment, ...] = (
    DemoDeployment("embeddings", "bge-large-en", 2),
    DemoDeployment("reranker", "bge-reranker-base", 3),
    DemoDeployment("summariser", "flan-t5-large", 4),
)


class DemoDeploymentsError(Exception):
    """The demo deployments cannot be seeded; the message says why."""


def _free_slots() -> dict[int, int]:
    """Free MPS slots of DEMO_NODE per GPU index, as the inventory sees them."""
    free: dict[int, int] = defaultdict(int)
    for index in Partition.objects.filter(free_partition_filter(), gpu__node__name=DEMO_NODE).values_list(
            "gpu__index", flat=True):
        free[index] += 1
    return free


def _run_batch(cluster: SimulatedCluster, keep_free: int) -> list[str]:
    """Batch pods in every free slot of DEMO_NODE except those of GPU ``keep_free``; their names."""
    names: list[str] = []
    for index, count in sorted(_free_slots().items()):
        if index == keep_free:
            continue
        for _ in range(count):
            name = f"backfill-{index}-{len(names)}"
            cluster.run_pod(BATCH_NAMESPACE, name, DEMO_NODE, resources={RESOURCE_GPU: 1}, gpus=[index])
            names.append(name)
    sync_inventory(cluster)
    return names


def seed_demo_deployments(cluster: SimulatedCluster) -> list[Deployment]:
    """Place the demo deployments (see the module docstring) on a freshly seeded demo cluster."""
    deployments = []
    for demo in DEMO_DEPLOYMENTS:
        batch = _run_batch(cluster, keep_free=demo.gpu)
        try:
            deployment = deploy(DeploySpec(name=demo.name, model=demo.model, memory_gb=6, sharing="mps",
                                           share_percent=25, namespace=DEMO_NAMESPACE), cluster=cluster,
                                nodes=[DEMO_NODE])
        finally:
            for name in batch:
                cluster.delete_pod(BATCH_NAMESPACE, name)
            sync_inventory(cluster)
        placement = deployment.placements.get()
        if placement.gpu_indexes != [demo.gpu]:
            raise DemoDeploymentsError(f"{demo.name} was placed on GPU {placement.gpu_indexes}, not {demo.gpu}")
        deployments.append(deployment)
    return deployments


def load_demo_deployments(*, if_empty: bool = False) -> list[Deployment]:
    """Seed the demo deployments on the simulated demo cluster; with ``if_empty`` nothing when any
    deployment was ever made (a user's own work is never joined by the demo's) or when the
    inventory is not the demo's."""
    if settings.GPUPLANE_CLUSTER == "kubernetes":
        raise DemoDeploymentsError("GPUPLANE_CLUSTER is 'kubernetes': the demo deployments are for the simulator only.")
    if if_empty and Deployment.objects.exists():
        return []
    if not Partition.objects.filter(gpu__node__name=DEMO_NODE).exists():
        if if_empty:  # not the demo cluster (make run must still start)
            return []
        raise DemoDeploymentsError(f"no {DEMO_NODE} in the inventory: load the demo cluster first (load_demo_cluster)")
    return seed_demo_deployments(SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE))
