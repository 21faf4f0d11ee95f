"""A small simulated cluster for the reconciler tests: MPS nodes with gpuplane deployments on them.

The tests drive ``rollouts.reconciler.reconcile`` directly, one tick at a time, with a fake
clock for the simulated cluster and the reconciler's ``now`` in step.
"""
from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from django.conf import settings

from lifecycle.models import AuditEvent
from nodes.cluster.base import ClusterNode
from nodes.cluster.sim import SimulatedCluster
from nodes.contract import LABEL_DEPLOYMENT, LABEL_DEVICE_PLUGIN_CONFIG
from nodes.demo import H100_PRODUCT
from nodes.inventory.sync import sync_inventory
from nodes.sharing.node_config import NodeConfig, render_device_plugin_config, render_mig_parted_entries
from nodes.vocabulary import SharingMode
from rollouts.choices import RolloutStatus
from rollouts.control import act
from rollouts.creating import create_rollout, validate_request
from rollouts.models import RollingUpdate, RolloutNode
from rollouts.reconciler import reconcile
from rollouts.restoring import ACTIVE_PLACEMENTS
from scheduler import services
from scheduler.models import Deployment
from scheduler.services import DeploySpec
from scheduler.services.moving import advance_moves
from tests.scheduler.inventory import FakeClock

MPS_2 = NodeConfig.of(SharingMode.MPS, 2)
MPS_4 = NodeConfig.of(SharingMode.MPS, 4)
TIMESLICE_4 = NodeConfig.of(SharingMode.TIMESLICE, 4)
EXCLUSIVE = NodeConfig.of(SharingMode.EXCLUSIVE)
MIG_2X3G = NodeConfig.of(SharingMode.MIG, None, {"3g.40gb": 2})
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
    now = datetime.fromtimestamp(clock.now, UTC)
    done = reconcile(cluster=cluster, now=now)
    advance_moves(cluster=cluster, now=now)  # the mover's beat task: the rollout's moves
    clock.advance(seconds)
    return done


def started(cluster: SimulatedCluster, names=("gpu-1", "gpu-2", "gpu-3", "gpu-4"), config: NodeConfig = MPS_4,
            max_unavailable: int = 1, **options) -> RollingUpdate:
    """A rollout of ``names`` to ``config``, created through the preview and started."""
    request = validate_request("update", list(names), config.as_dict(), max_unavailable=max_unavailable, **options)
    return act(create_rollout(request), "start", cluster=cluster)


def run(cluster: SimulatedCluster, clock: FakeClock, rollout: RollingUpdate, *, ticks: int = 200,
        check=None) -> RollingUpdate:
    """Tick until the rollout stops running (at most ``ticks``), calling ``check`` after each tick."""
    for _ in range(ticks):
        tick(cluster, clock)
        if check is not None:
            check()
        rollout.refresh_from_db()
        if rollout.status != RolloutStatus.RUNNING:
            break
    return rollout


def node_named(cluster: SimulatedCluster, name: str) -> ClusterNode:
    return next(n for n in cluster.list_nodes() if n.name == name)


class PluginNeverReports(SimulatedCluster):
    """The device plugin pod restarts but never picks up a new config (its labels stay as they were)."""

    def restart_device_plugin(self, node: str) -> None:
        return None


def mig_ready(cluster: SimulatedCluster, mig_entries=None) -> None:
    """The device-plugin and mig-parted configs for MIG_2X3G (``mig_entries`` instead of its own) and EXCLUSIVE."""
    cluster.set_device_plugin_config(*render_device_plugin_config(MIG_2X3G))
    name, entries = render_mig_parted_entries(MIG_2X3G)
    cluster.set_mig_config(name, mig_entries or entries)
    cluster.set_mig_config(*render_mig_parted_entries(EXCLUSIVE))


def verbs_of(step: RolloutNode) -> list[str]:
    return list(AuditEvent.objects.filter(object_type="rollouts.rolloutnode", object_id=str(step.pk))
                .order_by("pk").values_list("verb", flat=True))


def active_placements() -> dict[str, int]:
    """Active replicas per deployment name: 1 each when nothing was left doubled or lost."""
    return {d.name: d.placements.filter(status__in=ACTIVE_PLACEMENTS).count() for d in Deployment.objects.order_by("name")}


def served_and_within(cluster: SimulatedCluster, max_cordoned: int = 1):
    """A checker for every tick: each workload has a ready replica, at most ``max_cordoned`` nodes are cordoned."""
    def check() -> None:
        assert min(ready_replicas(cluster).values()) >= 1, f"a workload had no ready replica: {ready_replicas(cluster)}"
        cordoned = [n.name for n in cluster.list_nodes() if n.unschedulable]
        assert len(cordoned) <= max_cordoned, f"cordoned at once: {cordoned}"
    return check
