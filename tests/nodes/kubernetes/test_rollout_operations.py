"""KubernetesCluster's rollout operations against a stateful fake API server, then a whole rollout.

test_node_changes.py proves the shape of each single request; here each operation a rollout uses
(cordon, eviction, the label switch, the device plugin restart) is sent to `FakeCluster`
(tests/nodes/kubernetes/fake_cluster.py), which keeps the objects and plays the controllers, and
is read back through KubernetesCluster, as the rollout's steps read it. The last test runs a small
rolling MPS R=2 -> R=4 update through `rollouts.reconciler.reconcile` with KubernetesCluster as the
backend and checks the requests the API server received, node by node: cordon, evictions (never a
DELETE of a workload pod), the label patch, the plugin pod's delete, uncordon.
"""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from lifecycle.models import AuditEvent
from nodes.cluster.base import ClusterNode, EvictionBlocked, NotFound, WorkloadSpec
from nodes.cluster.kubernetes import KubernetesCluster
from nodes.cluster.manifests import pinned_node
from nodes.contract import (
    LABEL_DEPLOYMENT,
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_REPLICAS,
    LABEL_SHARING_MODE,
    LABEL_SHARING_STRATEGY,
    RESOURCE_GPU,
)
from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.node_configs import applied_config
from nodes.sharing.node_config import NodeConfig, node_labels, render_device_plugin_config
from nodes.vocabulary import SharingMode
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import act
from rollouts.creating import create_rollout, validate_request
from rollouts.models import RollingUpdate
from rollouts.reconciler import reconcile
from scheduler import services
from scheduler.services import DeploySpec
from scheduler.services.watching import watch_deployment
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import STRATEGIC_MERGE_PATCH, FakeKubeAPI, RecordedRequest
from tests.nodes.kubernetes.fake_cluster import PLUGIN_NAMESPACE, UNSCHEDULABLE_TAINT, FakeCluster

MPS_2 = NodeConfig.of(SharingMode.MPS, 2)
MPS_4 = NodeConfig.of(SharingMode.MPS, 4)
MPS_2_NAME, MPS_4_NAME = render_device_plugin_config(MPS_2)[0], render_device_plugin_config(MPS_4)[0]


@pytest.fixture
def fake(kube) -> FakeCluster:
    """Two one-GPU H100 nodes at MPS R=2 (their plugins running it), the MPS R=4 config available."""
    fake = FakeCluster(kube, configs=(MPS_2, MPS_4))
    fake.add_gpu_node("gpu-node-1", MPS_2)
    fake.add_gpu_node("gpu-node-2", MPS_2)
    return fake


def node(cluster: KubernetesCluster, name: str) -> ClusterNode:
    return next(n for n in cluster.list_nodes() if n.name == name)


def pinned(name: str, node_name: str) -> WorkloadSpec:
    return WorkloadSpec(namespace="ml", name=name, node_name=node_name, image="vllm/vllm-openai:v0.6.4",
                        resources={RESOURCE_GPU: 1}, labels={"app.kubernetes.io/part-of": "llama"})


def running_pod(fake: FakeCluster, cluster: KubernetesCluster, spec: WorkloadSpec) -> str:
    cluster.create_workload(spec)
    fake.tick()  # the ReplicaSet's pod is created and bound
    fake.tick()  # and Ready
    [pod] = [p for p in cluster.list_gpu_pods() if p.name.startswith(spec.name)]
    assert pod.ready and pod.node_name == spec.node_name
    return pod.name


# --- cordon ---------------------------------------------------------------------------------


def test_cordon_and_uncordon_patch_spec_unschedulable_and_leave_the_node_s_own_taints(kube, fake, cluster):
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    fake.nodes["gpu-node-1"]["spec"]["taints"] = [gpu_taint]

    cluster.cordon("gpu-node-1")

    patch = kube.only_request()
    assert (patch.method, patch.path, patch.content_type) == ("PATCH", "/api/v1/nodes/gpu-node-1", STRATEGIC_MERGE_PATCH)
    # spec.unschedulable only: a taints list in a patch would replace the node's own taints.
    assert patch.body == {"spec": {"unschedulable": True}}
    cordoned = node(cluster, "gpu-node-1")
    assert cordoned.unschedulable
    assert {t.key for t in cordoned.taints} == {"nvidia.com/gpu", UNSCHEDULABLE_TAINT["key"]}
    assert not node(cluster, "gpu-node-2").unschedulable

    cluster.uncordon("gpu-node-1")

    assert kube.requests[-1].body == {"spec": {"unschedulable": False}}
    open_again = node(cluster, "gpu-node-1")
    assert not open_again.unschedulable
    assert [t.key for t in open_again.taints] == ["nvidia.com/gpu"]


def test_cordoning_twice_is_harmless(fake, cluster):
    cluster.cordon("gpu-node-1")
    cluster.cordon("gpu-node-1")

    assert [t.key for t in node(cluster, "gpu-node-1").taints] == [UNSCHEDULABLE_TAINT["key"]]


def test_cordoning_a_node_that_is_gone_raises_not_found(fake, cluster):
    with pytest.raises(NotFound, match='cordon node gpu-node-9: HTTP 404 NotFound: nodes "gpu-node-9" not found'):
        cluster.cordon("gpu-node-9")


# --- eviction -------------------------------------------------------------------------------


def test_an_eviction_posts_a_policy_v1_eviction_and_the_replica_set_s_new_pod_waits_off_the_cordoned_node(
        kube, fake, cluster):
    pod_name = running_pod(fake, cluster, pinned("llama", "gpu-node-1"))
    cluster.cordon("gpu-node-1")
    before = len(kube.requests)

    cluster.evict_pod("ml", pod_name)

    eviction = kube.requests[before]
    assert (eviction.method, eviction.path) == ("POST", f"/api/v1/namespaces/ml/pods/{pod_name}/eviction")
    assert eviction.body == {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod_name, "namespace": "ml"}}
    assert not [p for p in cluster.list_gpu_pods() if p.name == pod_name]
    fake.tick()
    [replacement] = cluster.list_gpu_pods()
    assert replacement.name != pod_name
    assert (replacement.node_name, replacement.phase) == ("", "Pending")  # its node is cordoned
    with pytest.raises(NotFound, match=f'evict pod ml/{pod_name}: HTTP 404 NotFound: pods "{pod_name}" not found'):
        cluster.evict_pod("ml", pod_name)


def test_an_eviction_a_disruption_budget_refuses_raises_eviction_blocked_with_the_server_s_message(kube, fake, cluster):
    pod_name = running_pod(fake, cluster, pinned("llama", "gpu-node-1"))
    kube.on("POST", f"/api/v1/namespaces/ml/pods/{pod_name}/eviction", k8s.eviction_blocked("llama-pdb", 1, 1),
            status=429, headers={"Retry-After": "10"})

    with pytest.raises(EvictionBlocked) as blocked:
        cluster.evict_pod("ml", pod_name)

    assert "HTTP 429 TooManyRequests: Cannot evict pod as it would violate the pod's disruption budget." in str(blocked.value)
    assert "The disruption budget llama-pdb needs 1 healthy pods and has 1 currently" in str(blocked.value)
    assert [p.name for p in cluster.list_gpu_pods()] == [pod_name]  # still running


# --- labels ---------------------------------------------------------------------------------


def test_a_label_switch_merges_into_the_node_s_labels_and_none_removes_one(kube, fake, cluster):
    fake.nodes["gpu-node-1"]["metadata"]["labels"][LABEL_SHARING_MODE] = "mps-weighted"
    labels_before = node(cluster, "gpu-node-1").labels
    before = len(kube.requests)

    cluster.set_node_labels("gpu-node-1", {LABEL_DEVICE_PLUGIN_CONFIG: MPS_4_NAME, LABEL_SHARING_MODE: None})

    patch = kube.requests[before]
    assert (patch.method, patch.path, patch.content_type) == ("PATCH", "/api/v1/nodes/gpu-node-1", STRATEGIC_MERGE_PATCH)
    assert patch.body == {"metadata": {"labels": {LABEL_DEVICE_PLUGIN_CONFIG: MPS_4_NAME, LABEL_SHARING_MODE: None}}}
    after = node(cluster, "gpu-node-1").labels
    assert after[LABEL_DEVICE_PLUGIN_CONFIG] == MPS_4_NAME
    assert LABEL_SHARING_MODE not in after
    # A merge: every other label (GFD's among them) is still there, unchanged.
    untouched = {k: v for k, v in labels_before.items() if k not in (LABEL_DEVICE_PLUGIN_CONFIG, LABEL_SHARING_MODE)}
    assert {k: after[k] for k in untouched} == untouched


# --- device plugin --------------------------------------------------------------------------


def test_a_plugin_restart_deletes_the_node_s_plugin_pod_and_the_new_one_proves_the_new_config(kube, fake, cluster):
    cluster.set_node_labels("gpu-node-1", {LABEL_DEVICE_PLUGIN_CONFIG: MPS_4_NAME})
    fake.tick()
    # A label alone changes nothing: the running plugin read its config when it started.
    assert node(cluster, "gpu-node-1").labels[LABEL_GPU_REPLICAS] == "2"
    [old] = fake.pods_on("gpu-node-1")
    other_node_plugin = fake.pods_on("gpu-node-2")
    before = len(kube.requests)

    cluster.restart_device_plugin("gpu-node-1")

    listing, deletion = kube.requests[before:]
    assert (listing.method, listing.path) == ("GET", f"/api/v1/namespaces/{PLUGIN_NAMESPACE}/pods")
    assert listing.param("labelSelector") == "app=nvidia-device-plugin-daemonset"
    assert listing.param("fieldSelector") == "spec.nodeName=gpu-node-1"
    namespace, old_name = old.split("/")
    assert (deletion.method, deletion.path) == ("DELETE", f"/api/v1/namespaces/{namespace}/pods/{old_name}")
    [new] = fake.pods_on("gpu-node-1")
    assert new != old  # the DaemonSet made a new pod
    assert fake.pods_on("gpu-node-2") == other_node_plugin
    assert node(cluster, "gpu-node-1").allocatable[RESOURCE_GPU] == 2  # not yet: the new plugin is starting

    fake.tick()

    proven = node(cluster, "gpu-node-1")
    assert proven.allocatable[RESOURCE_GPU] == 4
    assert (proven.labels[LABEL_GPU_REPLICAS], proven.labels[LABEL_SHARING_STRATEGY]) == ("4", "mps")
    assert proven.labels[LABEL_GPU_PRODUCT] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert node(cluster, "gpu-node-2").allocatable[RESOURCE_GPU] == 2


def test_every_plugin_pod_on_the_node_is_deleted_and_one_already_gone_is_no_error(kube, cluster):
    # Mid DaemonSet rolling update two plugin pods can run on one node; one ends on its own meanwhile.
    old = k8s.device_plugin_pod("gpu-node-1", "nvidia-device-plugin-daemonset-old11")
    new = k8s.device_plugin_pod("gpu-node-1", "nvidia-device-plugin-daemonset-new22")
    kube.on("GET", "/api/v1/namespaces/gpu-operator/pods", k8s.list_object("Pod", [old, new]))
    kube.on("DELETE", "/api/v1/namespaces/gpu-operator/pods/nvidia-device-plugin-daemonset-old11",
            k8s.not_found("pods", "nvidia-device-plugin-daemonset-old11"), status=404)
    kube.on("DELETE", "/api/v1/namespaces/gpu-operator/pods/nvidia-device-plugin-daemonset-new22", new)

    cluster.restart_device_plugin("gpu-node-1")

    assert [(r.method, r.path.rsplit("/", 1)[-1]) for r in kube.requests] == [
        ("GET", "pods"),
        ("DELETE", "nvidia-device-plugin-daemonset-old11"),
        ("DELETE", "nvidia-device-plugin-daemonset-new22"),
    ]


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
        rollout = act(create_rollout(request), "start", cluster=self.cluster)
        self.first = len(self.kube.requests)
        now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
        for _ in range(ticks):
            self._note_pods()
            reconcile(cluster=self.cluster, now=now)
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
def test_evictions_a_disruption_budget_refuses_are_backed_off_and_retried_through_the_kubernetes_backend(
        settings, kube, fake, cluster):
    settings.ROLLOUT_EVICTION_BACKOFF_S = 5
    run = RolloutRun(kube, fake, cluster)
    fake.evictions_refused = 2

    rollout = run.run([run.busy])

    assert rollout.status == RolloutStatus.SUCCEEDED, rollout.message
    evictions = [r for r in run.requests if r.path.endswith("/eviction")]
    assert len(evictions) == 3 and len({r.path for r in evictions}) == 1  # the same pod, asked three times
    # Each retry waited out the back-off (ticks are a second apart).
    asked_at = [run.evictions_by_tick.index(n) for n in (1, 2, 3)]
    assert all(later - earlier >= 5 for earlier, later in zip(asked_at, asked_at[1:], strict=False))
    blocked = AuditEvent.objects.filter(verb="rolloutnode.eviction_blocked").values_list("reason", flat=True)
    assert len(blocked) == 2
    assert all("Cannot evict pod as it would violate the pod's disruption budget." in reason for reason in blocked)
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
