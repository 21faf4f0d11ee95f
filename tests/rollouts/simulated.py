"""A small simulated cluster for the reconciler tests: MPS nodes with gpuplane deployments on them.

The tests drive ``rollouts.reconciler.reconcile`` directly, one tick at a time, with a fake
clock for the simulated cluster and the reconciler's ``now`` in step.
"""
from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from django.conf import settings

from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_DEPLOYMENT, LABEL_DEVICE_PLUGIN_CONFIG
from nodes.demo import H100_PRODUCT
from nodes.inventory.sync import sync_inventory
from nodes.sharing.node_config import NodeConfig, render_device_plugin_config
from nodes.vocabulary import SharingMode
from rollouts.reconciler import reconcile
from scheduler import services
from scheduler.models import Deployment
from scheduler.services import DeploySpec
from tests.scheduler.inventory import FakeClock

MPS_2 = NodeConfig.of(SharingMode.MPS, 2)
MPS_4 = NodeConfig.of(SharingMode.MPS, 4)
TIMESLICE_4 = NodeConfig.of(SharingMode.TIMESLICE, 4)
EXCLUSIVE = NodeConfig.of(SharingMode.EXCLUSIVE)
H100_MIB = 81559


def mps_cluster(clock: FakeClock, node_count: int, deployments: int,
                cluster_class: type[SimulatedCluster] = SimulatedCluster, *, start: NodeConfig = MPS_2,
                sharing: str = "mps", share_percent: int | None = 25) -> SimulatedCluster:
    """``node_count`` one-GPU H100 nodes at ``start`` (MPS R=2) and ``deployments`` one-replica
    deployments asking for ``sharing`` (MPS, a quarter of a GPU), all ready."""
    cluster = cluster_class(settings.GPUPLANE_SIMULATED_STATE, clock=clock, pod_ready_delay_s=2.0)
    for config in (MPS_2, MPS_4, TIMESLICE_4, EXCLUSIVE):
        cluster.set_device_plugin_config(*render_device_plugin_config(config))
    label = render_device_plugin_config(start)[0]
    for number in range(1, node_count + 1):
        cluster.add_gpu_node(f"gpu-{number}", product=H100_PRODUCT, gpu_count=1, gpu_memory_mib=H100_MIB,
                             labels={LABEL_DEVICE_PLUGIN_CONFIG: label})
    sync_inventory(cluster)
    for number in range(1, deployments + 1):
        services.deploy(DeploySpec(name=f"svc-{number}", model="m", memory_gb=8, sharing=sharing,
                                   share_percent=share_percent), cluster=cluster)
    clock.advance(3)
    sync_inventory(cluster)
    return cluster


def ready_replicas(cluster: SimulatedCluster) -> dict[int, int]:
    """Ready pods per gpuplane deployment, as the cluster shows them (0 for a deployment with none)."""
    ready = Counter(int(pod.labels[LABEL_DEPLOYMENT]) for pod in cluster.list_gpu_pods()
                    if pod.ready and LABEL_DEPLOYMENT in pod.labels)
    return {pk: ready.get(pk, 0) for pk in Deployment.objects.values_list("pk", flat=True)}


def tick(cluster: SimulatedCluster, clock: FakeClock, seconds: float = 1.0) -> dict:
    """One reconciler tick at the clock's now, then the clock moves on."""
    done = reconcile(cluster=cluster, now=datetime.fromtimestamp(clock.now, UTC))
    clock.advance(seconds)
    return done
