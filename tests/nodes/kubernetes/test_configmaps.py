"""KubernetesCluster's ConfigMap calls at the HTTP level: a read (404 is None), a create, a replace
from the resourceVersion read (409 when stale) and a dry run; the simulator answers the same way."""
from __future__ import annotations

import pytest

from nodes.cluster.base import ClusterConfigMap, ClusterError, Conflict, NotFound
from nodes.cluster.sim import SimulatedCluster
from tests.nodes.kubernetes import api_objects as k8s

PATH = "/api/v1/namespaces/gpu-operator/configmaps"


def stored(version: str = "42") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "plugin", "namespace": "gpu-operator", "resourceVersion": version,
                         "labels": {"app.kubernetes.io/managed-by": "gpuplane"}},
            "data": {"gpuplane-mps-2": "version: v1\n"}}


def test_it_reads_a_configmap_with_its_version_and_a_missing_one_is_none(kube, cluster):
    kube.on("GET", f"{PATH}/plugin", stored())
    kube.on("GET", f"{PATH}/absent", k8s.not_found("configmaps", "absent"), status=404)

    assert cluster.read_configmap("gpu-operator", "plugin") == ClusterConfigMap(
        "gpu-operator", "plugin", {"gpuplane-mps-2": "version: v1\n"},
        {"app.kubernetes.io/managed-by": "gpuplane"}, "42")
    assert cluster.read_configmap("gpu-operator", "absent") is None


def test_a_new_configmap_is_posted_and_a_read_one_replaced_from_its_version(kube, cluster):
    kube.on("POST", PATH, stored("1"), status=201)
    kube.on("PUT", f"{PATH}/plugin", stored("43"))

    cluster.write_configmap(ClusterConfigMap("gpu-operator", "plugin", {"a": "1"}))
    cluster.write_configmap(ClusterConfigMap("gpu-operator", "plugin", {"a": "2"}, resource_version="42"), dry_run=True)

    create, replace = kube.requests
    assert (create.method, create.path, create.param("dryRun"), create.param("fieldManager")) == (
        "POST", PATH, None, "gpuplane")
    assert create.body == {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"},
                           "metadata": {"name": "plugin", "namespace": "gpu-operator", "labels": {}}}
    assert (replace.method, replace.param("dryRun")) == ("PUT", "All")
    assert replace.body["metadata"]["resourceVersion"] == "42" and replace.body["data"] == {"a": "2"}


def test_a_stale_version_is_a_conflict_and_a_refusal_a_cluster_error(kube, cluster):
    kube.on("PUT", f"{PATH}/plugin", k8s.status_error(409, "Conflict", "the object has been modified"), status=409)
    kube.on("POST", PATH, k8s.status_error(403, "Forbidden", "cannot create configmaps"), status=403)

    with pytest.raises(Conflict, match="HTTP 409 Conflict"):
        cluster.write_configmap(ClusterConfigMap("gpu-operator", "plugin", {}, resource_version="41"))
    with pytest.raises(ClusterError, match="HTTP 403 Forbidden: cannot create configmaps"):
        cluster.write_configmap(ClusterConfigMap("gpu-operator", "other", {}))


def test_the_simulator_checks_versions_and_stores_nothing_on_a_dry_run(tmp_path):
    sim = SimulatedCluster(str(tmp_path / "state"))
    assert sim.read_configmap("gpu-operator", "plugin") is None

    sim.write_configmap(ClusterConfigMap("gpu-operator", "plugin", {"a": "1"}), dry_run=True)
    assert sim.read_configmap("gpu-operator", "plugin") is None
    sim.write_configmap(ClusterConfigMap("gpu-operator", "plugin", {"a": "1"}))
    first = sim.read_configmap("gpu-operator", "plugin")
    assert first.data == {"a": "1"} and first.resource_version

    with pytest.raises(Conflict):
        sim.write_configmap(ClusterConfigMap("gpu-operator", "plugin", {"a": "2"}))  # exists already
    sim.write_configmap(ClusterConfigMap("gpu-operator", "plugin", {"a": "2"}, resource_version=first.resource_version))
    with pytest.raises(Conflict):  # from the version read before that write
        sim.write_configmap(ClusterConfigMap("gpu-operator", "plugin", {"a": "3"}, resource_version=first.resource_version))
    with pytest.raises(NotFound):
        sim.write_configmap(ClusterConfigMap("gpu-operator", "gone", {}, resource_version="7"))
    assert sim.read_configmap("gpu-operator", "plugin").data == {"a": "2"}
