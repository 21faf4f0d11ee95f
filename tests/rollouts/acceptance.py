"""Issue 9's must-show 1, the harness: a simulated cluster of 8 GPU nodes full of gpuplane deployments,
and a checker that watches a rolling update tick by tick.

The cluster runs with the simulator's real delays (pods ready 2 s after binding, the MIG manager
5 s, a restarted device plugin 3 s), on a fake clock that each reconciler tick moves on by a
second. Every deployment is placed through ``scheduler.services.deploy`` onto one node of the
eight: the others are cordoned while it is placed, so each node holds a whole deployment and its
drain must move every replica of it. A spare node, added afterwards at the target config, gives the
first node's replicas somewhere to pre-warm; after that each updated node takes the next one's.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from nodes.catalog import lookup_product
from nodes.cluster.base import ClusterNode
from nodes.cluster.sim import SimulatedCluster
from nodes.cluster.sim.objects import REMOVAL_REASONS
from nodes.contract import (
    LABEL_DEPLOYMENT,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_REPLICAS,
    LABEL_MIG_CONFIG,
    LABEL_MIG_CONFIG_STATE,
    LABEL_SHARING_STRATEGY,
    RESOURCE_GPU,
    RESOURCE_MIG_PREFIX,
)
from nodes.inventory.sync import sync_inventory
from nodes.sharing.node_config import (
    NodeConfig,
    device_plugin_config_name,
    mig_config_name,
    node_labels,
    render_device_plugin_config,
    render_mig_parted_entries,
)
from nodes.vocabulary import SharingMode
from rollouts.choices import NodeState
from rollouts.models import RollingUpdate
from rollouts.reconciler import reconcile
from rollouts.steps import IN_FLIGHT
from scheduler import services
from scheduler.models import Deployment
from scheduler.services import DeploySpec
from scheduler.services.moving import advance_moves
from tests.scheduler.inventory import FakeClock

NODES = tuple(f"gpu-{number}" for number in range(1, 9))
SPARE = "spare-1"
REPLICAS = 2
# GFD's nvidia.com/gpu.sharing-strategy per mode (none for exclusive and MIG).
STRATEGY = {SharingMode.EXCLUSIVE: "none", SharingMode.MIG: "none", SharingMode.MPS: "mps",
            SharingMode.TIMESLICE: "time-slicing"}


@dataclass(frozen=True)
class Scenario:
    """Eight nodes of ``product`` at ``start``, one deployment of ``REPLICAS`` replicas (``deploy``:
    DeploySpec's sharing fields) on each, rolled to ``target``."""

    product: str
    gpu_count: int
    start: NodeConfig
    target: NodeConfig
    deploy: dict[str, Any] = field(default_factory=dict)


def build(clock: FakeClock, scenario: Scenario) -> SimulatedCluster:
    """The cluster of the module docstring, every replica ready, the inventory synced."""
    cluster = SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE, clock=clock, pod_ready_delay_s=2.0,
                               mig_reconfigure_s=5.0, plugin_restart_s=3.0)
    # The GPU operator's ConfigMaps hold every named config the nodes will select.
    for config in (scenario.start, scenario.target):
        cluster.set_device_plugin_config(*render_device_plugin_config(config))
        cluster.set_mig_config(*render_mig_parted_entries(config))
    for name in NODES:
        _add_node(cluster, name, scenario, scenario.start)
        cluster.cordon(name)
    clock.advance(10)  # the MIG manager and the plugin it restarts are done
    for number, name in enumerate(NODES, start=1):
        cluster.uncordon(name)
        sync_inventory(cluster)
        services.deploy(DeploySpec(name=f"svc-{number}", model="m", replicas=REPLICAS, **scenario.deploy),
                        cluster=cluster)
        cluster.cordon(name)
    for name in NODES:
        cluster.uncordon(name)
    _add_node(cluster, SPARE, scenario, scenario.target)
    clock.advance(10)
    sync_inventory(cluster)
    holders = Counter(pod.node_name for pod in cluster.list_gpu_pods() if pod.ready and LABEL_DEPLOYMENT in pod.labels)
    assert holders == dict.fromkeys(NODES, REPLICAS), f"each node holds one whole deployment: {holders}"
    return cluster


def _add_node(cluster: SimulatedCluster, name: str, scenario: Scenario, config: NodeConfig) -> None:
    model = lookup_product(scenario.product)
    labels = {key: value for key, value in node_labels(config, mig_capable=model.mig_capable).items() if value}
    cluster.add_gpu_node(name, product=scenario.product, gpu_count=scenario.gpu_count,
                         gpu_memory_mib=model.memory_mib, labels=labels)


def proves(node: ClusterNode, target: NodeConfig) -> list[str]:
    """What of ``target`` the node does not show yet (GFD labels, allocatable); empty when proven."""
    wrong = []
    labels = node.labels
    expected = {LABEL_DEVICE_PLUGIN_CONFIG: device_plugin_config_name(target),
                LABEL_SHARING_STRATEGY: STRATEGY[target.mode],
                LABEL_GPU_REPLICAS: str(target.replicas or 1)}
    if target.mode == SharingMode.MIG:
        expected[LABEL_MIG_CONFIG] = mig_config_name(target)
        expected[LABEL_MIG_CONFIG_STATE] = "success"
        for profile, count in target.mig_layout or ():
            expected[f"{RESOURCE_MIG_PREFIX}{profile}.count"] = str(count * len(node.gpus))
    wrong += [f"{key}={labels.get(key)!r}, not {value!r}" for key, value in expected.items() if labels.get(key) != value]
    if target.mode == SharingMode.MIG:
        allocatable = {f"{RESOURCE_MIG_PREFIX}{p}": c * len(node.gpus) for p, c in target.mig_layout or ()}
        allocatable[RESOURCE_GPU] = 0
    else:
        allocatable = {RESOURCE_GPU: len(node.gpus) * (target.replicas or 1)}
    if node.allocatable != allocatable:
        wrong.append(f"allocatable {node.allocatable}, not {allocatable}")
    return wrong


@dataclass
class Checker:
    """Samples the cluster after every tick: every deployment's ready replicas, who is cordoned, and
    whether each node the rollout calls done really shows the target."""

    cluster: SimulatedCluster
    rollout: RollingUpdate
    target: NodeConfig
    ticks: int = 0
    cordoned_at: dict[str, list[int]] = field(default_factory=dict)
    turns: dict[str, list[int]] = field(default_factory=dict)
    lowest_ready: dict[str, int] = field(default_factory=dict)
    events: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)
    before: set[tuple[Any, ...]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.before = {_event_key(event) for event in self.cluster.events()}

    def sample(self) -> None:
        self.ticks += 1
        desired = dict(Deployment.objects.values_list("name", "replicas"))
        names = dict(Deployment.objects.values_list("pk", "name"))
        ready = Counter(names[int(pod.labels[LABEL_DEPLOYMENT])] for pod in self.cluster.list_gpu_pods()
                        if pod.ready and LABEL_DEPLOYMENT in pod.labels)
        for name, wanted in desired.items():
            self.lowest_ready[name] = min(self.lowest_ready.get(name, ready[name]), ready[name])
            assert ready[name] >= wanted, f"tick {self.ticks}: {name} has {ready[name]} of {wanted} replicas ready"
        steps = {step.node_name: step.state for step in self.rollout.nodes.all()}
        in_flight = [name for name, state in steps.items() if state in IN_FLIGHT]
        assert len(in_flight) <= self.rollout.max_unavailable, f"tick {self.ticks}: in flight {in_flight}"
        nodes = {node.name: node for node in self.cluster.list_nodes()}
        for name, node in nodes.items():
            if node.unschedulable:
                self.cordoned_at.setdefault(name, []).append(self.ticks)
                assert name in in_flight, f"tick {self.ticks}: {name} is cordoned outside its turn ({steps.get(name)})"
        for name in in_flight:
            self.turns.setdefault(name, []).append(self.ticks)
        for name, state in steps.items():
            if state == NodeState.SUCCEEDED:
                assert not proves(nodes[name], self.target), f"tick {self.ticks}: {name} succeeded unproven: " \
                                                              f"{proves(nodes[name], self.target)}"
        # The record keeps the latest events only: collected every tick, none is missed.
        for event in self.cluster.events():
            if _event_key(event) not in self.before:
                self.events[_event_key(event)] = event

    def removals(self) -> list[dict[str, Any]]:
        """Every pod removal the simulator recorded during the rollout (workload pods, not the plugin's)."""
        return [e for e in self.events.values()
                if e["reason"] in REMOVAL_REASONS and not e["name"].startswith("gpu-operator/")]


def _event_key(event: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((key, str(value)) for key, value in event.items()))


def run(cluster: SimulatedCluster, clock: FakeClock, rollout: RollingUpdate, checker: Checker, *,
        ticks: int = 400) -> RollingUpdate:
    """Reconcile tick by tick (1 s of simulated time each) until the rollout leaves running, sampling each tick."""
    for _ in range(ticks):
        now = datetime.fromtimestamp(clock.now, UTC)
        reconcile(cluster=cluster, now=now)
        advance_moves(cluster=cluster, now=now)  # the mover's beat task: the rollout's moves
        clock.advance(1)
        checker.sample()
        rollout.refresh_from_db()
        if rollout.status != "running":
            break
    return rollout
