"""KubernetesCluster at the HTTP level: an unreachable API and odd answers.

The client talks to a local test server (tests/nodes/kubernetes/fake_api.py) answering with real
Kubernetes API JSON shapes; each test proves which requests KubernetesCluster sends (paths, verbs,
content types, bodies, query parameters, auth) and how it reads the answers.
"""
from __future__ import annotations

import socket

import pytest

from nodes.cluster.base import (
    ClusterError,
)
from nodes.cluster.kubernetes import KubernetesCluster
from tests.nodes.kubernetes import api_objects as k8s

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
