"""KubernetesCluster at the HTTP level: listing PodDisruptionBudgets (policy/v1), and the
simulator answering the same call from its stored PDBs."""
from __future__ import annotations

import pytest

from nodes.cluster.base import ClusterError, ClusterPDB
from nodes.cluster.sim import SimulatedCluster
from tests.nodes.kubernetes import api_objects as k8s


def pdb(namespace: str, name: str, spec: dict) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": spec, "status": {"currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1}}


def test_it_lists_pdbs_of_all_namespaces_with_their_budgets(kube, cluster):
    kube.on("GET", "/apis/policy/v1/poddisruptionbudgets", k8s.list_object("PodDisruptionBudget", [
        pdb("serving", "chat", {"minAvailable": 2, "selector": {"matchLabels": {"app.kubernetes.io/name": "chat"}}}),
        pdb("batch", "train", {"maxUnavailable": "25%", "selector": {"matchLabels": {"team": "ml"}}}),
        pdb("dev", "all", {"maxUnavailable": 0, "selector": {}}),
    ], api_version="policy/v1"))

    found = cluster.list_pdbs()

    request = kube.only_request()
    assert (request.method, request.path) == ("GET", "/apis/policy/v1/poddisruptionbudgets")
    assert request.param("limit") == "500"
    assert found == [
        ClusterPDB("serving", "chat", {"app.kubernetes.io/name": "chat"}, min_available=2),
        ClusterPDB("batch", "train", {"team": "ml"}, max_unavailable="25%"),
        ClusterPDB("dev", "all", {}, max_unavailable=0),
    ]


def test_the_simulator_lists_the_pdbs_it_stores(tmp_path):
    sim = SimulatedCluster(str(tmp_path / "state.json"))
    sim.add_pdb("serving", "chat", {"app.kubernetes.io/name": "chat"}, min_available=2)
    sim.add_pdb("batch", "train", {"team": "ml"}, max_unavailable=1)
    assert sim.list_pdbs() == [
        ClusterPDB("batch", "train", {"team": "ml"}, max_unavailable=1),
        ClusterPDB("serving", "chat", {"app.kubernetes.io/name": "chat"}, min_available=2),
    ]


PDBS = "/apis/policy/v1/namespaces/serving/poddisruptionbudgets"
CHAT = ClusterPDB("serving", "chat", {"gpuplane.io/deployment": "7"}, max_unavailable=1)


def test_a_pdb_is_created_and_one_that_exists_is_merge_patched(kube, cluster):
    kube.on("POST", PDBS, k8s.status_error(409, "AlreadyExists", "poddisruptionbudgets \"chat\" already exists"),
            status=409)
    kube.on("PATCH", f"{PDBS}/chat", pdb("serving", "chat", {}))

    cluster.apply_pdb(CHAT)

    create, patch = kube.requests
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "chat", "namespace": "serving"},
            "spec": {"selector": {"matchLabels": {"gpuplane.io/deployment": "7"}}, "maxUnavailable": 1}}
    assert (create.method, create.param("fieldManager"), create.body) == ("POST", "gpuplane", body)
    assert (patch.method, patch.content_type, patch.body) == ("PATCH", "application/merge-patch+json", body)


def test_deleting_a_pdb_that_is_gone_is_no_error(kube, cluster):
    kube.on("DELETE", f"{PDBS}/chat", k8s.not_found("poddisruptionbudgets", "chat"), status=404)
    cluster.delete_pdb("serving", "chat")
    assert (kube.only_request().method, kube.only_request().path) == ("DELETE", f"{PDBS}/chat")


def test_the_simulator_applies_and_deletes_pdbs_and_refuses_a_bad_budget(tmp_path):
    sim = SimulatedCluster(str(tmp_path / "state.json"))
    sim.apply_pdb(CHAT)
    sim.apply_pdb(ClusterPDB("serving", "chat", {"gpuplane.io/deployment": "7"}, min_available="50%"))
    assert sim.list_pdbs() == [ClusterPDB("serving", "chat", {"gpuplane.io/deployment": "7"}, min_available="50%")]
    with pytest.raises(ClusterError, match="percentage"):
        sim.apply_pdb(ClusterPDB("serving", "bad", {}, max_unavailable="half"))
    sim.delete_pdb("serving", "chat")
    sim.delete_pdb("serving", "chat")
    assert sim.list_pdbs() == []
