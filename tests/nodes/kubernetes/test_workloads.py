"""KubernetesCluster at the HTTP level: creating, scaling, deleting and watching Deployments.

The client talks to a local test server (tests/nodes/kubernetes/fake_api.py) answering with real
Kubernetes API JSON shapes; each test proves which requests KubernetesCluster sends (paths, verbs,
content types, bodies, query parameters, auth) and how it reads the answers.
"""
from __future__ import annotations

import pytest

from nodes.cluster.base import (
    ClusterError,
    NotFound,
    WorkloadSpec,
)
from nodes.cluster.manifests import deployment_manifest
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import Reply


def _spec(**overrides) -> WorkloadSpec:
    values = {
        "namespace": "ml",
        "name": "llama",
        "node_name": "gpu-node-1",
        "image": "vllm/vllm-openai:v0.6.4",
        "replicas": 2,
        "resources": {"nvidia.com/gpu": 1},
        "env": {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=40G"},
        "labels": {"gpuplane.io/deployment": "17"},
        "annotations": {"gpuplane.io/decision": "42", "gpuplane.io/sharing-mode": "mps-weighted"},
        "priority_class_name": "gpuplane-high",
    }
    values.update(overrides)
    return WorkloadSpec(**values)


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
