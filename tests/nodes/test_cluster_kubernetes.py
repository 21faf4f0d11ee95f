"""KubernetesCluster at the HTTP level.

The client talks to a local test server (tests/nodes/k8s_fake_server.py) answering with real
Kubernetes API JSON shapes (a Node with GFD labels, Pods with GPU and MIG limits, the Eviction
API's 429, Status errors); each test proves which requests KubernetesCluster sends (paths, verbs,
content types, bodies, query parameters, auth) and how it reads the answers.
"""
from __future__ import annotations

import ast
import json
import socket
from pathlib import Path

import pytest

from nodes.cluster.base import ClusterBackend, ClusterError, EvictionBlocked, NotFound, WorkloadSpec, get_cluster
from nodes.cluster.kubernetes import KubernetesCluster
from nodes.cluster.manifests import deployment_manifest
from nodes.vocabulary import Taint
from tests.nodes import k8s_fake_server as k8s
from tests.nodes.k8s_fake_server import FakeKubeAPI, Reply

REPO = Path(__file__).resolve().parents[2]
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


@pytest.fixture(scope="module")
def server():
    api = FakeKubeAPI().start()
    yield api
    api.stop()


@pytest.fixture
def kube(server) -> FakeKubeAPI:
    server.reset()
    return server


@pytest.fixture
def cluster(kube) -> KubernetesCluster:
    return KubernetesCluster.for_host(kube.url, token="test-token")


def _spec(**overrides) -> WorkloadSpec:
    values = dict(
        namespace="ml",
        name="llama",
        node_name="gpu-node-1",
        image="vllm/vllm-openai:v0.6.4",
        replicas=2,
        resources={"nvidia.com/gpu": 1},
        env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40G"},
        labels={"gpuplane.io/deployment": "17"},
        annotations={"gpuplane.io/decision": "42", "gpuplane.io/sharing-mode": "mps-weighted"},
        priority_class_name="gpuplane-high",
    )
    values.update(overrides)
    return WorkloadSpec(**values)


# --- nodes --------------------------------------------------------------------------------


def test_it_lists_nodes_and_parses_gfd_labels_allocatable_conditions_and_taints(kube, cluster):
    kube.on("GET", "/api/v1/nodes", k8s.list_object("Node", [k8s.gpu_node("gpu-node-1"), k8s.cpu_node("cpu-node-1")]))

    gpu, cpu = cluster.list_nodes()

    request = kube.only_request()
    assert (request.method, request.path) == ("GET", "/api/v1/nodes")
    assert request.param("limit") == "500"
    assert gpu.name == "gpu-node-1"
    assert len(gpu.gpus) == 8  # nvidia.com/gpu.count
    assert {g.product for g in gpu.gpus} == {"NVIDIA-H100-80GB-HBM3"}
    assert {g.memory_mib for g in gpu.gpus} == {81559}  # nvidia.com/gpu.memory, MiB
    assert gpu.ready is True and gpu.unschedulable is False
    assert gpu.taints == (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    assert gpu.allocatable == {"nvidia.com/gpu": 8}  # only extended resources; hugepages-* are not
    assert gpu.cpu_allocatable_milli == 191_450  # "191450m"
    assert gpu.memory_allocatable_mib == 2_053_668  # 2102956624Ki / 1024
    assert gpu.labels["nvidia.com/mig.capable"] == "true"
    assert gpu.labels["nvidia.com/cuda.driver.major"] == "550"
    assert cpu.name == "cpu-node-1" and cpu.gpus == () and cpu.ready is False


def test_it_follows_continue_tokens_until_the_last_page(kube):
    pages = {
        None: k8s.list_object("Node", [k8s.gpu_node("gpu-node-1")], continue_token="eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MX0"),
        "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MX0": k8s.list_object("Node", [k8s.gpu_node("gpu-node-2")]),
    }
    kube.on("GET", "/api/v1/nodes", handler=lambda request: Reply(200, pages[request.param("continue")]))
    cluster = KubernetesCluster.for_host(kube.url, page_size=1)

    names = [node.name for node in cluster.list_nodes()]

    assert names == ["gpu-node-1", "gpu-node-2"]
    first, second = kube.requests
    assert first.param("limit") == "1" and first.param("continue") is None
    assert second.param("limit") == "1" and second.param("continue") == "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MX0"


def test_it_sends_the_bearer_token(kube, cluster):
    kube.on("GET", "/api/v1/nodes", k8s.list_object("Node", []))

    assert cluster.list_nodes() == []

    assert kube.only_request().headers["authorization"] == "Bearer test-token"


def test_it_sends_no_authorization_without_a_token(kube):
    kube.on("GET", "/api/v1/nodes", k8s.list_object("Node", []))

    KubernetesCluster.for_host(kube.url).list_nodes()

    assert "authorization" not in kube.only_request().headers


# --- pods ---------------------------------------------------------------------------------


def test_it_lists_unfinished_gpu_and_mig_pods_of_all_namespaces(kube, cluster):
    kube.on(
        "GET",
        "/api/v1/pods",
        k8s.list_object(
            "Pod",
            [
                k8s.pod("llama-7c9d8f6b5-abcde", "ml", limits={"nvidia.com/gpu": "1"}, priority_class_name="gpuplane-high"),
                k8s.pod("bert-5f6d7c8b9-fghij", "research", limits={"nvidia.com/mig-3g.40gb": "1"}, ready=False),
                k8s.pod("nginx-6d4cf56db6-klmno", "web", node_name="cpu-node-1", limits={"cpu": "500m", "memory": "256Mi"}),
            ],
        ),
    )

    llama, bert = cluster.list_gpu_pods()

    request = kube.only_request()
    assert (request.method, request.path) == ("GET", "/api/v1/pods")
    assert request.param("fieldSelector") == "status.phase!=Succeeded,status.phase!=Failed"
    assert llama.key == "ml/llama-7c9d8f6b5-abcde"
    assert llama.gpu_requests == {"nvidia.com/gpu": 1}
    assert (llama.node_name, llama.phase, llama.ready) == ("gpu-node-1", "Running", True)
    assert (llama.priority_class_name, llama.owner_kind) == ("gpuplane-high", "ReplicaSet")
    assert bert.key == "research/bert-5f6d7c8b9-fghij"
    assert bert.gpu_requests == {"nvidia.com/mig-3g.40gb": 1}
    assert bert.ready is False


# --- node changes -------------------------------------------------------------------------


def test_it_patches_node_labels_with_null_for_removal(kube, cluster):
    kube.on("PATCH", "/api/v1/nodes/gpu-node-1", k8s.gpu_node())

    cluster.set_node_labels("gpu-node-1", {"nvidia.com/device-plugin.config": "h100-time-slicing-4", "nvidia.com/mig.config": None})

    request = kube.only_request()
    assert (request.method, request.path) == ("PATCH", "/api/v1/nodes/gpu-node-1")
    assert request.content_type == STRATEGIC_MERGE_PATCH
    assert request.param("fieldManager") == "gpuplane"
    assert request.body == {"metadata": {"labels": {"nvidia.com/device-plugin.config": "h100-time-slicing-4", "nvidia.com/mig.config": None}}}


def test_it_sends_nothing_for_an_empty_label_change(kube, cluster):
    cluster.set_node_labels("gpu-node-1", {})

    assert kube.requests == []


@pytest.mark.parametrize("method, unschedulable", [("cordon", True), ("uncordon", False)])
def test_it_cordons_and_uncordons_with_a_spec_patch(kube, cluster, method, unschedulable):
    kube.on("PATCH", "/api/v1/nodes/gpu-node-1", k8s.gpu_node(unschedulable=unschedulable))

    getattr(cluster, method)("gpu-node-1")

    request = kube.only_request()
    assert (request.method, request.path, request.content_type) == ("PATCH", "/api/v1/nodes/gpu-node-1", STRATEGIC_MERGE_PATCH)
    assert request.body == {"spec": {"unschedulable": unschedulable}}


def test_a_patch_of_a_missing_node_raises_not_found(kube, cluster):
    kube.on("PATCH", "/api/v1/nodes/gone-node", k8s.not_found("nodes", "gone-node"), status=404)

    with pytest.raises(NotFound, match='cordon node gone-node: HTTP 404 NotFound: nodes "gone-node" not found'):
        cluster.cordon("gone-node")


# --- eviction -----------------------------------------------------------------------------

EVICTION_PATH = "/api/v1/namespaces/ml/pods/llama-7c9d8f6b5-abcde/eviction"


def test_it_evicts_through_the_policy_v1_eviction_api(kube, cluster):
    kube.on("POST", EVICTION_PATH, k8s.eviction_accepted(), status=201)

    cluster.evict_pod("ml", "llama-7c9d8f6b5-abcde")

    request = kube.only_request()
    assert (request.method, request.path) == ("POST", EVICTION_PATH)
    assert request.content_type == "application/json"
    assert request.body == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "llama-7c9d8f6b5-abcde", "namespace": "ml"},
    }


def test_an_eviction_429_raises_eviction_blocked_with_the_api_message(kube, cluster):
    kube.on("POST", EVICTION_PATH, k8s.eviction_blocked("llama-pdb", 2, 2), status=429, headers={"Retry-After": "10"})

    with pytest.raises(EvictionBlocked) as caught:
        cluster.evict_pod("ml", "llama-7c9d8f6b5-abcde")

    message = str(caught.value)
    assert message.startswith("evict pod ml/llama-7c9d8f6b5-abcde: HTTP 429 TooManyRequests: ")
    assert "Cannot evict pod as it would violate the pod's disruption budget." in message
    assert "The disruption budget llama-pdb needs 2 healthy pods and has 2 currently" in message
    assert "retry after 10s" in message
    assert len(kube.requests) == 1  # a POST is never retried by the transport


def test_an_eviction_of_a_missing_pod_raises_not_found(kube, cluster):
    kube.on("POST", EVICTION_PATH, k8s.not_found("pods", "llama-7c9d8f6b5-abcde"), status=404)

    with pytest.raises(NotFound, match='pods "llama-7c9d8f6b5-abcde" not found'):
        cluster.evict_pod("ml", "llama-7c9d8f6b5-abcde")


def test_other_eviction_failures_are_plain_cluster_errors(kube, cluster):
    body = k8s.status_error(500, "InternalError", 'Internal error occurred: failed calling webhook "pod-guard.example.com"')
    kube.on("POST", EVICTION_PATH, body, status=500)

    with pytest.raises(ClusterError) as caught:
        cluster.evict_pod("ml", "llama-7c9d8f6b5-abcde")

    assert type(caught.value) is ClusterError
    assert "HTTP 500 InternalError: Internal error occurred" in str(caught.value)


def test_a_429_outside_eviction_is_throttling_not_a_disruption_budget(kube, cluster):
    kube.on("PATCH", "/api/v1/nodes/gpu-node-1", k8s.status_error(429, "TooManyRequests", "Too many requests, please try again later."), status=429)

    with pytest.raises(ClusterError) as caught:
        cluster.cordon("gpu-node-1")

    assert not isinstance(caught.value, EvictionBlocked)
    assert "HTTP 429 TooManyRequests" in str(caught.value)


# --- workloads ----------------------------------------------------------------------------

DEPLOYMENTS_PATH = "/apis/apps/v1/namespaces/ml/deployments"


def test_it_creates_a_pinned_deployment(kube, cluster):
    kube.on("POST", DEPLOYMENTS_PATH, handler=lambda request: Reply(201, k8s.deployment(request.body)))

    cluster.create_workload(_spec())

    request = kube.only_request()
    assert (request.method, request.path, request.content_type) == ("POST", DEPLOYMENTS_PATH, "application/json")
    body = request.body
    assert (body["apiVersion"], body["kind"]) == ("apps/v1", "Deployment")
    assert body["metadata"]["name"] == "llama" and body["metadata"]["namespace"] == "ml"
    assert body["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuplane"
    assert body["metadata"]["labels"]["gpuplane.io/deployment"] == "17"
    assert body["metadata"]["annotations"]["gpuplane.io/sharing-mode"] == "mps-weighted"
    assert body["spec"]["replicas"] == 2
    pod_spec = body["spec"]["template"]["spec"]
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-node-1"]}]}]
    assert "nodeName" not in pod_spec  # affinity, so the default scheduler still checks the fit
    assert pod_spec["priorityClassName"] == "gpuplane-high"
    (container,) = pod_spec["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert container["env"] == [
        {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "50"},
        {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=40G"},
    ]
    assert body["spec"]["selector"]["matchLabels"].items() <= body["spec"]["template"]["metadata"]["labels"].items()


def test_creating_an_existing_deployment_says_it_already_exists(kube, cluster):
    kube.on("POST", DEPLOYMENTS_PATH, k8s.already_exists("deployments", "llama", "apps"), status=409)

    with pytest.raises(ClusterError, match="deployment ml/llama already exists") as caught:
        cluster.create_workload(_spec())

    assert not isinstance(caught.value, NotFound)
    assert 'deployments.apps "llama" already exists' in str(caught.value)


def test_it_scales_through_the_scale_subresource(kube, cluster):
    kube.on("PATCH", f"{DEPLOYMENTS_PATH}/llama/scale", k8s.scale("ml", "llama", 3))

    cluster.scale_workload("ml", "llama", 3)

    request = kube.only_request()
    assert (request.method, request.path) == ("PATCH", "/apis/apps/v1/namespaces/ml/deployments/llama/scale")
    assert request.content_type == "application/merge-patch+json"
    assert request.body == {"spec": {"replicas": 3}}


def test_scaling_a_missing_deployment_raises_not_found(kube, cluster):
    kube.on("PATCH", f"{DEPLOYMENTS_PATH}/llama/scale", k8s.not_found("deployments", "llama", "apps"), status=404)

    with pytest.raises(NotFound, match="scale deployment ml/llama to 3: HTTP 404"):
        cluster.scale_workload("ml", "llama", 3)


def test_it_deletes_with_foreground_propagation(kube, cluster):
    kube.on("DELETE", f"{DEPLOYMENTS_PATH}/llama", k8s.deployment(deployment_manifest(_spec())))

    cluster.delete_workload("ml", "llama")

    request = kube.only_request()
    assert (request.method, request.path) == ("DELETE", "/apis/apps/v1/namespaces/ml/deployments/llama")
    assert request.param("propagationPolicy") == "Foreground"


def test_deleting_a_deployment_that_is_gone_raises_not_found_like_the_simulator(kube, cluster):
    kube.on("DELETE", f"{DEPLOYMENTS_PATH}/llama", k8s.not_found("deployments", "llama", "apps"), status=404)

    with pytest.raises(NotFound, match='delete deployment ml/llama: HTTP 404 NotFound: deployments.apps "llama" not found'):
        cluster.delete_workload("ml", "llama")


def test_a_negative_scale_is_refused_before_any_request(kube, cluster):
    with pytest.raises(ClusterError, match="must be >= 0, not -1"):
        cluster.scale_workload("ml", "llama", -1)

    assert kube.requests == []


@pytest.mark.parametrize(
    "generation, observed_generation, replicas, ready_replicas, expected",
    [
        (1, 1, 2, 2, True),  # all replicas ready
        (1, 1, 2, 1, False),  # one still starting
        (1, None, 2, None, False),  # the controller has not looked at it yet
        (2, 1, 3, 2, False),  # scaled 2 -> 3: status still describes generation 1
        (2, 2, 3, 3, True),
        (1, 1, 0, None, True),  # scaled to zero: nothing to wait for
    ],
)
def test_workload_readiness_needs_the_current_generation_and_every_replica(
    kube, cluster, generation, observed_generation, replicas, ready_replicas, expected
):
    manifest = deployment_manifest(_spec(replicas=replicas))
    kube.on(
        "GET",
        f"{DEPLOYMENTS_PATH}/llama",
        k8s.deployment(manifest, generation=generation, observed_generation=observed_generation, ready_replicas=ready_replicas),
    )

    assert cluster.workload_ready("ml", "llama") is expected
    assert kube.only_request().path == "/apis/apps/v1/namespaces/ml/deployments/llama"


def test_readiness_of_a_missing_deployment_raises_not_found(kube, cluster):
    kube.on("GET", f"{DEPLOYMENTS_PATH}/llama", k8s.not_found("deployments", "llama", "apps"), status=404)

    with pytest.raises(NotFound, match='deployments.apps "llama" not found'):
        cluster.workload_ready("ml", "llama")


# --- device plugin ------------------------------------------------------------------------


def test_it_restarts_the_device_plugin_by_deleting_its_pod_on_the_node(kube, cluster):
    plugin = k8s.device_plugin_pod("gpu-node-1", "nvidia-device-plugin-daemonset-x7k2p")
    kube.on("GET", "/api/v1/namespaces/gpu-operator/pods", k8s.list_object("Pod", [plugin]))
    kube.on("DELETE", "/api/v1/namespaces/gpu-operator/pods/nvidia-device-plugin-daemonset-x7k2p", plugin)

    cluster.restart_device_plugin("gpu-node-1")

    listing, deletion = kube.requests
    assert (listing.method, listing.path) == ("GET", "/api/v1/namespaces/gpu-operator/pods")
    assert listing.param("labelSelector") == "app=nvidia-device-plugin-daemonset"
    assert listing.param("fieldSelector") == "spec.nodeName=gpu-node-1"
    assert (deletion.method, deletion.path) == ("DELETE", "/api/v1/namespaces/gpu-operator/pods/nvidia-device-plugin-daemonset-x7k2p")


def test_the_device_plugin_namespace_is_configurable(kube):
    plugin = k8s.device_plugin_pod("gpu-node-1", "nvidia-device-plugin-daemonset-q9z8w")
    kube.on("GET", "/api/v1/namespaces/nvidia-system/pods", k8s.list_object("Pod", [plugin]))
    kube.on("DELETE", "/api/v1/namespaces/nvidia-system/pods/nvidia-device-plugin-daemonset-q9z8w", plugin)

    KubernetesCluster.for_host(kube.url, device_plugin_namespace="nvidia-system").restart_device_plugin("gpu-node-1")

    assert [r.path for r in kube.requests] == [
        "/api/v1/namespaces/nvidia-system/pods",
        "/api/v1/namespaces/nvidia-system/pods/nvidia-device-plugin-daemonset-q9z8w",
    ]


def test_a_missing_device_plugin_pod_is_an_error_naming_namespace_and_selector(kube, cluster):
    kube.on("GET", "/api/v1/namespaces/gpu-operator/pods", k8s.list_object("Pod", []))

    with pytest.raises(ClusterError) as caught:
        cluster.restart_device_plugin("gpu-node-1")

    message = str(caught.value)
    assert "no NVIDIA device plugin pod on node gpu-node-1" in message
    assert "'gpu-operator'" in message and "'app=nvidia-device-plugin-daemonset'" in message
    assert [r.method for r in kube.requests] == ["GET"]  # nothing deleted


# --- transport and odd answers ------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_api_is_a_cluster_error_naming_the_address():
    port = _closed_port()
    cluster = KubernetesCluster.for_host(f"http://127.0.0.1:{port}", token="test-token")

    with pytest.raises(ClusterError, match=rf"list nodes: cannot reach the Kubernetes API at http://127\.0\.0\.1:{port}"):
        cluster.list_nodes()


def test_an_error_without_a_status_body_shows_what_came_back(kube, cluster):
    kube.on("GET", "/api/v1/nodes", b"upstream connect error or disconnect/reset before headers", status=503)

    with pytest.raises(ClusterError, match="list nodes: HTTP 503 Service Unavailable: upstream connect error"):
        cluster.list_nodes()


def test_a_forbidden_answer_keeps_the_rbac_message(kube, cluster):
    message = 'nodes "gpu-node-1" is forbidden: User "system:serviceaccount:gpuplane:gpuplane" cannot patch resource "nodes" in API group "" at the cluster scope'
    kube.on("PATCH", "/api/v1/nodes/gpu-node-1", k8s.status_error(403, "Forbidden", message, {"name": "gpu-node-1", "kind": "nodes"}), status=403)

    with pytest.raises(ClusterError, match="cordon node gpu-node-1: HTTP 403 Forbidden: .*cannot patch resource"):
        cluster.cordon("gpu-node-1")


def test_invalid_json_is_a_cluster_error(kube, cluster):
    kube.on("GET", "/api/v1/nodes", b"<html>login</html>", headers={"Content-Type": "text/html"})

    with pytest.raises(ClusterError, match="invalid JSON"):
        cluster.list_nodes()


# --- configuration ------------------------------------------------------------------------


def _kubeconfig(path: Path, server_url: str, token: str) -> Path:
    # JSON is valid YAML, and the kubeconfig loader reads YAML.
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": {"server": server_url}}],
                "users": [{"name": "ops", "user": {"token": token}}],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "ops"}}],
                "current-context": "lab",
            }
        )
    )
    return path


def test_from_settings_uses_the_configured_kubeconfig(kube, settings, tmp_path):
    settings.GPUPLANE_KUBECONFIG = str(_kubeconfig(tmp_path / "kubeconfig", kube.url, "kubeconfig-token"))
    kube.on("GET", "/api/v1/nodes", k8s.list_object("Node", [k8s.gpu_node()]))

    cluster = KubernetesCluster.from_settings()

    assert [n.name for n in cluster.list_nodes()] == ["gpu-node-1"]
    assert kube.only_request().headers["authorization"] == "Bearer kubeconfig-token"


def test_from_settings_reads_the_device_plugin_namespace(kube, settings, tmp_path):
    settings.GPUPLANE_KUBECONFIG = str(_kubeconfig(tmp_path / "kubeconfig", kube.url, "kubeconfig-token"))
    settings.GPUPLANE_DEVICE_PLUGIN_NAMESPACE = "nvidia-system"
    kube.on("GET", "/api/v1/namespaces/nvidia-system/pods", k8s.list_object("Pod", []))

    with pytest.raises(ClusterError, match="'nvidia-system'"):
        KubernetesCluster.from_settings().restart_device_plugin("gpu-node-1")

    assert kube.only_request().path == "/api/v1/namespaces/nvidia-system/pods"


def test_from_settings_reports_an_unusable_kubeconfig(settings, tmp_path):
    settings.GPUPLANE_KUBECONFIG = str(tmp_path / "missing-kubeconfig")

    with pytest.raises(ClusterError, match="cannot load kubeconfig .*missing-kubeconfig"):
        KubernetesCluster.from_settings()


def test_from_settings_prefers_the_in_cluster_service_account(kube, settings, monkeypatch, tmp_path):
    import kubernetes.config

    def fake_incluster(client_configuration):
        client_configuration.host = kube.url
        client_configuration.api_key = {"BearerToken": "Bearer service-account-token"}

    settings.GPUPLANE_KUBECONFIG = ""
    monkeypatch.setattr(kubernetes.config, "load_incluster_config", fake_incluster)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1", "wrong-token")))
    kube.on("GET", "/api/v1/nodes", k8s.list_object("Node", []))

    KubernetesCluster.from_settings().list_nodes()

    assert kube.only_request().headers["authorization"] == "Bearer service-account-token"


def test_from_settings_falls_back_to_the_default_kubeconfig_outside_a_cluster(kube, settings, monkeypatch, tmp_path):
    settings.GPUPLANE_KUBECONFIG = ""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "kubeconfig", kube.url, "default-token")))
    kube.on("GET", "/api/v1/nodes", k8s.list_object("Node", []))

    KubernetesCluster.from_settings().list_nodes()

    assert kube.only_request().headers["authorization"] == "Bearer default-token"


def test_from_settings_explains_when_nothing_is_configured(settings, monkeypatch, tmp_path):
    settings.GPUPLANE_KUBECONFIG = ""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))

    with pytest.raises(ClusterError, match="not running in a cluster .* and cannot load kubeconfig .*set GPUPLANE_KUBECONFIG"):
        KubernetesCluster.from_settings()


def test_get_cluster_builds_a_kubernetes_backend_when_configured(kube, settings, tmp_path):
    settings.GPUPLANE_CLUSTER = "kubernetes"
    settings.GPUPLANE_KUBECONFIG = str(_kubeconfig(tmp_path / "kubeconfig", kube.url, "kubeconfig-token"))

    cluster = get_cluster()

    assert isinstance(cluster, KubernetesCluster)
    assert isinstance(cluster, ClusterBackend)
    assert cluster.host == kube.url


# --- dependency rule ----------------------------------------------------------------------


def _imports_kubernetes(path: Path) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "kubernetes" for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "kubernetes":
            return True
    return False


def test_no_other_module_imports_the_kubernetes_client():
    allowed = REPO / "nodes" / "cluster" / "kubernetes.py"
    offenders = [
        str(path.relative_to(REPO))
        for package in ("nodes", "scheduler", "gpuplane")
        for path in sorted((REPO / package).rglob("*.py"))
        if path != allowed and _imports_kubernetes(path)
    ]

    assert offenders == []
    assert _imports_kubernetes(allowed)  # the check itself sees an import where there is one
