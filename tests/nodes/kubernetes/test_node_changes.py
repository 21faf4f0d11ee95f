"""KubernetesCluster at the HTTP level: node labels, cordoning, evictions and the device plugin restart.

The client talks to a local test server (tests/nodes/kubernetes/fake_api.py) answering with real
Kubernetes API JSON shapes; each test proves which requests KubernetesCluster sends (paths, verbs,
content types, bodies, query parameters, auth) and how it reads the answers.
"""
from __future__ import annotations

import pytest

from nodes.cluster.base import (
    ClusterError,
    EvictionBlocked,
    NotFound,
)
from nodes.cluster.kubernetes import KubernetesCluster
from tests.nodes.kubernetes import api_objects as k8s
from tests.nodes.kubernetes.fake_api import STRATEGIC_MERGE_PATCH

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
