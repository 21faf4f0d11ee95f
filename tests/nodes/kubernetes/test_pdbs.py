"""KubernetesCluster at the HTTP level: listing PodDisruptionBudgets (policy/v1), and the
simulator answering the same call from its stored PDBs."""
from __future__ import annotations

from nodes.cluster.base import ClusterPDB
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
