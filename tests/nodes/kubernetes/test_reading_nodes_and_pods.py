"""KubernetesCluster at the HTTP level: listing nodes and GPU pods.

The client talks to a local test server (tests/nodes/kubernetes/fake_api.py) answering with real
Kubernetes API JSON shapes; each test proves which requests KubernetesCluster sends (paths, verbs,
content types, bodies, query parameters, auth) and how it reads the answers.
"""
from __future__ import annotations

from nodes.cluster.kubernetes import KubernetesCluster
from nodes.vocabulary import Taint
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import Reply

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


def test_it_lists_unfinished_gpu_and_mig_pods_and_bound_pods_that_hold_cpu(kube, cluster):
    kube.on(
        "GET",
        "/api/v1/pods",
        k8s.list_object(
            "Pod",
            [
                k8s.pod("llama-7c9d8f6b5-abcde", "ml", limits={"nvidia.com/gpu": "1"}, priority_class_name="gpuplane-high"),
                k8s.pod("bert-5f6d7c8b9-fghij", "research", limits={"nvidia.com/mig-3g.40gb": "1"}, ready=False),
                k8s.pod("nginx-6d4cf56db6-klmno", "web", node_name="cpu-node-1", limits={"cpu": "500m", "memory": "256Mi"}),
                k8s.pod("pending-cpu-pod", "web", node_name="", limits={"cpu": "2"}),
            ],
        ),
    )

    llama, bert, nginx = cluster.list_gpu_pods()

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
    # Every bound pod holds its node's CPU and memory (NodeResourcesFit counts them all); an unbound
    # pod without GPUs holds nothing yet and is not listed.
    assert nginx.key == "web/nginx-6d4cf56db6-klmno" and nginx.gpu_requests == {}
    assert (nginx.node_name, nginx.cpu_request_milli, nginx.memory_request_mib) == ("cpu-node-1", 500, 256)
