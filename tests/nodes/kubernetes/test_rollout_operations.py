"""KubernetesCluster's rollout operations against a stateful fake API server, then a whole rollout.

test_node_changes.py proves the shape of each single request; here each operation a rollout uses
(cordon, eviction, the label switch, the device plugin restart) is sent to `FakeCluster`
(tests/nodes/kubernetes/fake_cluster.py), which keeps the objects and plays the controllers, and
is read back through KubernetesCluster, as the rollout's steps read it. Whole rollouts through this
backend are in test_rollout_through_kubernetes.py.
"""
from __future__ import annotations

import pytest

from nodes.cluster.base import ClusterNode, EvictionBlocked, NotFound, WorkloadSpec
from nodes.cluster.kubernetes import KubernetesCluster
from nodes.contract import (
    LABEL_DEVICE_PLUGIN_CONFIG,
    LABEL_GPU_PRODUCT,
    LABEL_GPU_REPLICAS,
    LABEL_SHARING_MODE,
    LABEL_SHARING_STRATEGY,
    RESOURCE_GPU,
)
from nodes.sharing.node_config import NodeConfig, render_device_plugin_config
from nodes.vocabulary import SharingMode
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import STRATEGIC_MERGE_PATCH
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
