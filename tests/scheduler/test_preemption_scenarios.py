"""Preemption through the deploy pipeline (must-show 4): a HIGH request on a full cluster evicts
exactly the minimal lower-priority set and is placed; with preemption off the 409 says what it
would have taken; a PodDisruptionBudget or an equal priority keeps a placement; quotas refuse
with 409 and the reason, preemption or not."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from nodes.cluster.base import ClusterPDB
from scheduler import services
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import AdmissionSettings, Deployment, NamespaceQuota, Placement
from scheduler.services import DeploySpec, NoCapacity
from tests.scheduler.inventory import check_invariants, empty_cluster, whole_gpu_cluster

pytestmark = pytest.mark.django_db


class PDBs:
    """The cluster with PodDisruptionBudgets the test sets."""

    def __init__(self, cluster, pdbs=()):
        self.cluster, self.pdbs = cluster, list(pdbs)

    def __getattr__(self, name):
        return getattr(self.cluster, name)

    def list_pdbs(self):
        return list(self.pdbs)


def deploy(cluster, name, priority, gpus=1, **fields) -> Deployment:
    return services.deploy(DeploySpec(name=name, namespace="ml", model="m", memory_gb=40, gpu_count=gpus,
                                      priority=priority, sharing="exclusive", allow_default_scheduler=False,
                                      **fields), cluster=cluster)


@pytest.fixture
def full():
    """Two nodes of 2 H100s: node-1 holds low-a and low-b, node-2 low-c and medium-d (by node pinning)."""
    whole_gpu_cluster(4, gpus_per_node=2, busy_per_node=0)
    cluster = empty_cluster()
    placed = {}
    for name, priority, node in (("low-a", "low", "node-1"), ("low-b", "low", "node-1"),
                                 ("low-c", "low", "node-2"), ("medium-d", "medium", "node-2")):
        placed[name] = services.deploy(DeploySpec(name=name, namespace="ml", model="m", memory_gb=40,
                                                  priority=priority, sharing="exclusive",
                                                  allow_default_scheduler=False), cluster=cluster, nodes=[node])
    return cluster, placed


def active(name: str) -> bool:
    return Placement.objects.filter(deployment__name=name, status__in=(
        PlacementStatus.BINDING, PlacementStatus.RESERVED, PlacementStatus.RUNNING)).exists()


def test_with_preemption_off_the_409_says_what_it_would_have_taken(full):
    cluster, placed = full
    with pytest.raises(NoCapacity) as refused:
        deploy(cluster, "llm", "high", gpus=2)
    body = refused.value.body()
    # Kueue's order: the most recently admitted of equal priorities first
    expected = [f"placement:{placed[n].placements.get().pk}" for n in ("low-b", "low-a")]
    assert body["preemption"] == {"node": "node-1", "victims": expected, "why_not": "preemption is off"}
    assert "preemption would evict" in body["detail"]
    assert all(active(n) for n in ("low-a", "low-b", "low-c", "medium-d"))


def test_a_high_request_on_a_full_cluster_evicts_exactly_the_minimal_lower_set_and_is_placed(full, operator):
    cluster, placed = full
    AdmissionSettings.objects.update_or_create(pk=1, defaults={"preemption_enabled": True})
    client = APIClient()
    client.force_authenticate(operator)
    response = client.post("/api/v1/deployments/", {"name": "llm", "model": "m", "memory_gb": 40, "gpu_count": 2,
                                                    "namespace": "ml", "priority": "high", "sharing": "exclusive"}, format="json")
    assert response.status_code == 201, response.json()
    llm = Deployment.objects.get(name="llm")
    assert llm.placements.get().node.name == "node-1"
    # exactly low-a and low-b (two lows on one node beat a low and a medium); the rest untouched
    assert (active("low-a"), active("low-b"), active("low-c"), active("medium-d")) == (False, False, True, True)
    for name in ("low-a", "low-b"):  # each victim is told why; with no replica left it has failed
        victim = Deployment.objects.get(name=name)
        assert "preempted by ml/llm" in victim.message and victim.status == DeploymentStatus.FAILED
    check_invariants()


def test_equal_priority_and_pdb_protected_placements_are_never_victims(full):
    cluster, placed = full
    AdmissionSettings.objects.update_or_create(pk=1, defaults={"preemption_enabled": True})
    # a medium request may only take lows; a PDB protects low-a: node-1 cannot be freed, node-2
    # holds medium-d (equal): nothing to do
    guarded = PDBs(cluster, [ClusterPDB("ml", "low-a", {"gpuplane.io/deployment": str(placed["low-a"].pk)},
                                        max_unavailable=0)])
    with pytest.raises(NoCapacity):
        deploy(guarded, "two", "medium", gpus=2)
    assert all(active(n) for n in ("low-a", "low-b", "low-c", "medium-d"))
    # one GPU for a medium: low-b (not protected) is enough, and low-a stays
    deploy(guarded, "one", "medium", gpus=1)
    assert active("low-a") and not active("low-b")


def test_quotas_refuse_with_409_and_the_reason_even_with_preemption_on(full, operator):
    AdmissionSettings.objects.update_or_create(pk=1, defaults={"preemption_enabled": True})
    # ml holds 4 GPUs; evicting one of its own lows would still leave it at 4 of 3.5
    NamespaceQuota.objects.create(namespace="ml", max_gpu_milli=3500)
    client = APIClient()
    client.force_authenticate(operator)
    response = client.post("/api/v1/deployments/", {"name": "more", "model": "m", "memory_gb": 40, "namespace": "ml",
                                                    "priority": "high", "sharing": "exclusive"}, format="json")
    assert response.status_code == 409 and "quota" in response.json()["detail"]
    assert all(active(n) for n in ("low-a", "low-b", "low-c", "medium-d"))


def test_a_delay_waits_before_preempting(full, settings):
    cluster, _ = full
    AdmissionSettings.objects.update_or_create(pk=1, defaults={"preemption_enabled": True, "preemption_delay_s": 60})
    with pytest.raises(NoCapacity) as refused:
        deploy(cluster, "llm", "high", gpus=2)
    assert "preemption waits 60 s" in refused.value.body()["preemption"]["why_not"]
    assert active("low-a")
    assert Deployment.objects.filter(name="llm").exclude(status=DeploymentStatus.FAILED).count() == 0
