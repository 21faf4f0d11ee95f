"""Must-show 4: a bind failure injected in the backend leaves capacity exactly as before."""
from __future__ import annotations

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from nodes.cluster.base import ClusterError
from nodes.cluster.sim import SimulatedCluster
from scheduler import services
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment
from scheduler.services import DeployFailed, DeploySpec
from tests.scheduler.inventory import capacity_state, check_invariants, demo_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    return demo_cluster()


@pytest.mark.parametrize("request_fields", [
    {"memory_gb": 40, "priority": "high", "latency_slo_ms": 50},
    {"memory_gb": 2, "sharing": "mps-weighted", "replicas": 3},
    {"memory_gb": 8, "priority": "low", "workload_type": "batch", "replicas": 4},
    {"memory_gb": 4, "sharing": "mig"},
    {"memory_gb": 150, "gpu_count": 4},
])
def test_a_refused_workload_fails_the_deployment_and_restores_capacity_exactly(cluster, request_fields):
    before = capacity_state()
    cluster.inject_fault("create_workload", "admission webhook denied the request")

    with pytest.raises(DeployFailed) as raised:
        services.deploy(DeploySpec(name="doomed", model="m", **request_fields), cluster=cluster)

    assert "admission webhook denied the request" in raised.value.message
    assert isinstance(raised.value, ClusterError)  # the deploy form catches ClusterError
    assert capacity_state() == before
    deployment = Deployment.objects.get()
    assert deployment.status == DeploymentStatus.FAILED
    assert "everything reserved was released" in deployment.message
    assert set(deployment.placements.values_list("status", flat=True)) == {PlacementStatus.FAILED}
    assert deployment.decisions.count() == deployment.replicas  # the record of why it went where
    check_invariants()


def test_workloads_created_before_the_failure_are_removed(cluster):
    # Two replicas on different nodes need two workloads; the second creation fails.
    real_create = SimulatedCluster.create_workload
    calls: list[str] = []

    def create_then_fail(self, spec):
        calls.append(spec.name)
        if len(calls) == 2:
            raise ClusterError("quota exceeded in namespace default")
        return real_create(self, spec)

    before = capacity_state()
    cluster.create_workload = create_then_fail.__get__(cluster)

    with pytest.raises(DeployFailed, match="quota exceeded"):
        services.deploy(DeploySpec(name="pair", model="m", memory_gb=8, priority="low", replicas=4), cluster=cluster)

    assert len(calls) == 2
    assert cluster.list_objects("Deployment") == []  # the first one was deleted again
    assert capacity_state() == before


def test_the_api_answers_502_with_the_clusters_message_not_500(operator, cluster):
    before = capacity_state()
    # The API builds its backend from settings: same state file, so the fault reaches it.
    SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE).inject_fault("create_workload", "node h100 is gone")
    client = APIClient()
    client.force_authenticate(operator)

    response = client.post("/api/v1/deployments/", {"name": "doomed", "model": "m", "memory_gb": 40},
                           format="json")

    assert response.status_code == 502
    body = response.json()
    assert "node h100 is gone" in body["detail"]
    assert body["status"] == "failed"
    assert Deployment.objects.get(pk=body["deployment"]).status == DeploymentStatus.FAILED
    assert capacity_state() == before
    # The next attempt goes through: the fault was used up, nothing was left reserved.
    again = client.post("/api/v1/deployments/", {"name": "retry", "model": "m", "memory_gb": 40}, format="json")
    assert again.status_code == 201


def test_a_refused_delete_is_a_502_and_keeps_the_reservation(operator, cluster):
    client = APIClient()
    client.force_authenticate(operator)
    created = client.post("/api/v1/deployments/", {"name": "keep", "model": "m", "memory_gb": 8}, format="json").json()
    reserved = capacity_state()
    SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE).inject_fault("delete_workload", "apiserver timeout")

    response = client.delete(f"/api/v1/deployments/{created['id']}/")

    assert response.status_code == 502
    assert "apiserver timeout" in response.json()["detail"]
    assert capacity_state() == reserved
