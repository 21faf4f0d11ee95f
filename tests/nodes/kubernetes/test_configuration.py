"""KubernetesCluster at the HTTP level: building the client from settings, kubeconfig or the service account.

The client talks to a local test server (tests/nodes/kubernetes/fake_api.py) answering with real
Kubernetes API JSON shapes; each test proves which requests KubernetesCluster sends (paths, verbs,
content types, bodies, query parameters, auth) and how it reads the answers.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from nodes.cluster.backends import get_cluster
from nodes.cluster.base import ClusterBackend, ClusterError
from nodes.cluster.kubernetes import KubernetesCluster
from tests.nodes.kubernetes import api_objects as k8s

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
