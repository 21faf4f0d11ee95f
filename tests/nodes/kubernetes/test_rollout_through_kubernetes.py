"""A whole rollout through KubernetesCluster against the stateful fake API server (FakeCluster).

A small rolling MPS R=2 -> R=4 update driven by ``rollouts.reconciler.reconcile``, with the
requests the API server received checked node by node: the configs written first, cordon,
evictions (never a DELETE of a workload pod), the label patch, the plugin pod's delete, uncordon;
then the faults (a disruption budget's 429s, a plugin that never reports) and a rollout whose
configs the cluster refuses to take.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml

from lifecycle.models import AuditEvent
from nodes.cluster.base import ClusterNode
from nodes.cluster.kubernetes import KubernetesCluster
from nodes.cluster.manifests import pinned_node
from nodes.contract import (
    LABEL_DEPLOYMENT,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_REPLICAS,
    RESOURCE_GPU,
)
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.sharing.node_config import NodeConfig, node_labels, render_device_plugin_config
from nodes.vocabulary import SharingMode
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import NotAllowed, act
from rollouts.creating import RolloutRefused, create_rollout, validate_request
from rollouts.models import RollingUpdate
from rollouts.reconciler import reconcile
from scheduler import services
from scheduler.models import Move
from scheduler.services import DeploySpec
from scheduler.services.moving import advance_moves
from scheduler.services.watching import watch_deployment
from tests.nodes.kubernetes.fake_api import FakeKubeAPI, RecordedRequest
from tests.nodes.kubernetes.fake_cluster import PLUGIN_NAMESPACE, FakeCluster

MPS_2 = NodeConfig.of(SharingMode.MPS, 2)
MPS_4 = NodeConfig.of(SharingMode.MPS, 4)
MPS_2_NAME, MPS_4_NAME = render_device_plugin_config(MPS_2)[0], render_device_plugin_config(MPS_4)[0]



@pytest.fixture
def fake(kube) -> FakeCluster:
    """Two one-GPU H100 nodes at MPS R=2 (their plugins running it)."""
    fake = FakeCluster(kube, configs=(MPS_2, MPS_4))
    fake.add_gpu_node("gpu-node-1", MPS_2)
    fake.add_gpu_node("gpu-node-2", MPS_2)
    return fake


def node(cluster: KubernetesCluster, name: str) -> ClusterNode:
    return next(n for n in cluster.list_nodes() if n.name == name)


# --- a whole rollout ------------------------------------------------------------------------


def node_operations(requests: list[RecordedRequest], name: str, pods_on_node: set[str]) -> list[str]:
    """What the API server was asked to do to node `name`, in order, repeats folded into one."""
    operations: list[str] = []
    for request in requests:
        if (request.method, request.path) == ("PATCH", f"/api/v1/nodes/{name}"):
            spec = (request.body.get("spec") or {})
            if "unschedulable" in spec:
                operations.append("cordon" if spec["unschedulable"] else "uncordon")
            if "labels" in (request.body.get("metadata") or {}):
                operations.append("label")
        elif request.method == "POST" and request.path.endswith("/eviction") and request.path.split("/")[-2] in pods_on_node:
            operations.append("evict")
        elif request.method == "DELETE" and request.path.split("/")[-1] in pods_on_node:
            operations.append("delete plugin pod" if f"/namespaces/{PLUGIN_NAMESPACE}/" in request.path else "DELETE POD")
    return [op for i, op in enumerate(operations) if i == 0 or op != operations[i - 1]]


class RolloutRun:
    """A gpuplane deployment (one 25 % MPS replica) on the fake cluster, and a rollout to MPS R=4 of
    `names` driven tick by tick: the reconciler, then the fake's controllers, a second apart."""

    def __init__(self, kube: FakeKubeAPI, fake: FakeCluster, cluster: KubernetesCluster) -> None:
        self.kube, self.fake, self.cluster = kube, fake, cluster
        # The operator set up only the config the nodes run now: gpuplane writes MPS R=4 itself.
        fake.remove_plugin_config(MPS_4_NAME)
        sync_inventory(cluster)
        self.deployment = services.deploy(DeploySpec(name="svc", model="m", memory_gb=8, sharing="mps",
                                                     share_percent=25), cluster=cluster)
        fake.tick()
        fake.tick()
        assert watch_deployment(self.deployment.pk, cluster=cluster) == "running"
        sync_inventory(cluster)
        self.busy = Node.objects.get(placements__deployment=self.deployment).name
        self.idle = ({"gpu-node-1", "gpu-node-2"} - {self.busy}).pop()
        # Every pod ever seen on each node, so evictions and deletes can be told apart by node.
        self.seen_on: dict[str, set[str]] = {name: set() for name in ("gpu-node-1", "gpu-node-2")}
        self.served: list[int] = []  # the deployment's ready pods after each tick
        self.evictions_by_tick: list[int] = []

    def run(self, names: list[str], ticks: int = 60) -> RollingUpdate:
        request = validate_request("mps4", names, MPS_4.as_dict(), max_unavailable=1)
        self.before_start = len(self.kube.requests)
        rollout = act(create_rollout(request, cluster=self.cluster), "start", cluster=self.cluster)
        self.first = len(self.kube.requests)
        now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        for _ in range(ticks):
            self._note_pods()
            reconcile(cluster=self.cluster, now=now)
            advance_moves(cluster=self.cluster, now=now)  # the mover's beat task: the rollout's moves
            self._note_pods()
            self.fake.tick()
            now += timedelta(seconds=1)
            self.served.append(self.fake.ready_pods(LABEL_DEPLOYMENT).get(str(self.deployment.pk), 0))
            assert self.served[-1] >= 1, "the deployment had no ready pod"
            self.evictions_by_tick.append(sum(1 for r in self.requests if r.path.endswith("/eviction")))
            rollout.refresh_from_db()
            if rollout.status != RolloutStatus.RUNNING:
                break
        return rollout

    @property
    def requests(self) -> list[RecordedRequest]:
        """What the API server received since the rollout started."""
        return self.kube.requests[self.first:]

    def operations(self, name: str) -> list[str]:
        return node_operations(self.requests, name, self.seen_on[name])

    def _note_pods(self) -> None:
        for name, pods in self.seen_on.items():
            pods.update(key.split("/")[1] for key in self.fake.pods_on(name))


def only_plugin_pods_were_deleted(requests: list[RecordedRequest]) -> bool:
    deleted = [r.path for r in requests if r.method == "DELETE" and "/pods/" in r.path]
    return bool(deleted) and all(f"/namespaces/{PLUGIN_NAMESPACE}/pods/" in path for path in deleted)


@pytest.mark.django_db
def test_a_rolling_mps_update_through_the_kubernetes_backend_evicts_switches_restarts_and_proves(
        settings, kube, fake, cluster):
    settings.ROLLOUT_STEP_TIMEOUT_S = 60
    run = RolloutRun(kube, fake, cluster)

    rollout = run.run(["gpu-node-1", "gpu-node-2"])

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    assert {n.state for n in rollout.nodes.all()} == {NodeState.SUCCEEDED}
    # Starting wrote the configs the switch needs (the device plugin's R=4, the MIG manager's
    # all-disabled for these MIG-capable H100s), after checking each write with a dry run, before
    # any node was touched.
    started = kube.requests[run.before_start:run.first]
    writes = [(r.method, r.path.rsplit("/", 1)[-1] if r.method == "PUT" else r.body["metadata"]["name"], r.param("dryRun"))
              for r in started if r.method in ("PUT", "POST") and "/configmaps" in r.path]
    checks = [("PUT", "gpuplane-device-plugin-configs", "All"), ("POST", "gpuplane-mig-parted-config", "All")]
    assert writes == checks * 2 + [  # create's preview, start's preview again, then the writes themselves
        ("PUT", "gpuplane-device-plugin-configs", None), ("POST", "gpuplane-mig-parted-config", None)]
    assert not [r for r in started if r.method == "PATCH"]  # nothing cordoned before the configs were there
    assert fake.plugin_config_names() == [MPS_2_NAME, MPS_4_NAME]
    mig_parted = yaml.safe_load(fake.configmaps["gpu-operator/gpuplane-mig-parted-config"]["data"]["config.yaml"])
    assert mig_parted["mig-configs"] == {"all-disabled": [{"devices": "all", "mig-enabled": False}]}
    busy, idle, requests = run.busy, run.idle, run.requests
    assert run.operations(busy) == ["cordon", "evict", "label", "delete plugin pod", "uncordon"]
    assert run.operations(idle) == ["cordon", "label", "delete plugin pod", "uncordon"]
    # Pre-warmed first: the copy was created on the other node before the original was evicted.
    [created] = [i for i, r in enumerate(requests) if (r.method, r.path) == ("POST", "/apis/apps/v1/namespaces/default/deployments")]
    [eviction] = [i for i, r in enumerate(requests) if r.path.endswith("/eviction")]
    assert created < eviction
    assert pinned_node(requests[created].body) == idle
    for name in (busy, idle):
        label_patches = [r for r in requests if r.path == f"/api/v1/nodes/{name}" and "metadata" in r.body]
        assert [r.body for r in label_patches] == [{"metadata": {"labels": node_labels(MPS_4, mig_capable=True)}}]
        proven = node(cluster, name)
        assert proven.allocatable[RESOURCE_GPU] == 4 and proven.labels[LABEL_GPU_REPLICAS] == "4"
        assert not proven.unschedulable
    # The only pods deleted directly are device plugin pods; the workload left through an eviction.
    assert only_plugin_pods_were_deleted(requests)
    assert all(applied_config(n) == MPS_4 for n in Node.objects.all())
    assert len(run.served) > 5


@pytest.mark.django_db
def test_evictions_a_disruption_budget_refuses_are_retried_by_the_mover_through_the_kubernetes_backend(
        kube, fake, cluster):
    run = RolloutRun(kube, fake, cluster)
    fake.evictions_refused = 2

    rollout = run.run([run.busy])

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    evictions = [r for r in run.requests if r.path.endswith("/eviction")]
    assert len(evictions) == 3 and len({r.path for r in evictions}) == 1  # the same pod, asked three times
    # The mover retries on its next tick (here a second apart; GPUPLANE_MOVE_INTERVAL_S in production).
    asked_at = [run.evictions_by_tick.index(n) for n in (1, 2, 3)]
    assert asked_at == sorted(set(asked_at))
    # The refusal is said on the move while it waits, and on the node's audit trail.
    blocked = AuditEvent.objects.filter(verb="rolloutnode.eviction_blocked").values_list("reason", flat=True)
    assert len(blocked) >= 1
    assert all("Cannot evict pod as it would violate the pod's disruption budget." in reason for reason in blocked)
    said = AuditEvent.objects.filter(verb="move.blocked").values_list("reason", flat=True)
    assert any("refused (429)" in reason for reason in said)
    assert Move.objects.get().status == "done"
    assert run.operations(run.busy) == ["cordon", "evict", "label", "delete plugin pod", "uncordon"]


@pytest.mark.django_db
def test_a_plugin_that_never_reports_times_out_and_the_node_gets_its_labels_back_and_is_uncordoned(
        settings, kube, fake, cluster):
    settings.ROLLOUT_STEP_TIMEOUT_S = 10
    run = RolloutRun(kube, fake, cluster)
    fake.plugin_hangs = True

    rollout = run.run([run.busy])

    assert rollout.status == RolloutStatus.PAUSED
    step = rollout.nodes.get()
    assert step.state == NodeState.FAILED and "took longer than 10 s" in step.reason
    # Switched, restarted, then put back as it was and restarted on it, and opened again.
    assert run.operations(run.busy) == ["cordon", "evict", "label", "delete plugin pod", "label", "delete plugin pod",
                                        "uncordon"]
    switch, restore = [r.body for r in run.requests if r.path == f"/api/v1/nodes/{run.busy}" and "metadata" in r.body]
    assert switch == {"metadata": {"labels": node_labels(MPS_4, mig_capable=True)}}
    assert restore["metadata"]["labels"] == {key: node_labels(MPS_2, mig_capable=True)[key] for key in switch["metadata"]["labels"]}
    back = node(cluster, run.busy)
    assert back.labels[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_2_NAME and not back.unschedulable
    assert only_plugin_pods_were_deleted(run.requests)
    assert min(run.served) >= 1


@pytest.mark.django_db
def test_a_rollout_whose_configs_cannot_be_written_is_refused_at_preview_create_and_start_before_any_cordon(
        kube, fake, cluster):
    run = RolloutRun(kube, fake, cluster)
    fake.configmap_writes_forbidden = True
    request = validate_request("mps4", [run.busy], MPS_4.as_dict(), max_unavailable=1)
    before = len(kube.requests)

    shown = request.preview(cluster)

    assert not shown.safe
    [problem] = [b for b in shown.blockers if MPS_4_NAME in b]
    assert "HTTP 403 Forbidden" in problem and "cannot update resource \"configmaps\"" in problem
    with pytest.raises(RolloutRefused):
        create_rollout(request, cluster=cluster)
    assert not RollingUpdate.objects.exists()
    # A rollout created while writes were allowed, then refused them by the time it starts.
    fake.configmap_writes_forbidden = False
    rollout = create_rollout(request, cluster=cluster)
    fake.configmap_writes_forbidden = True
    with pytest.raises(NotAllowed, match="403"):
        act(rollout, "start", cluster=cluster)
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.PENDING
    assert not [r for r in kube.requests[before:] if r.method in ("PATCH", "DELETE") or r.path.endswith("/eviction")]
    assert MPS_4_NAME not in fake.plugin_config_names()
