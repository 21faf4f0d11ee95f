"""scheduler.services: delete releases what deploy reserved, idempotently (on the demo cluster)."""
from __future__ import annotations

import pytest

from nodes.cluster.base import ClusterError
from nodes.models import Partition
from scheduler import services
from scheduler.choices import DeploymentStatus, PlacementStatus
from tests.scheduler.inventory import capacity_state, check_invariants
from tests.scheduler.services.specs import spec

pytestmark = pytest.mark.django_db


# ---- delete ------------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides", [
    {"name": "whole", "memory_gb": 40, "priority": "high", "latency_slo_ms": 50, "replicas": 2},
    {"name": "gang", "memory_gb": 120, "gpu_count": 4},
    {"name": "weighted", "memory_gb": 2, "sharing": "mps-weighted", "replicas": 3},
    {"name": "slices", "memory_gb": 3, "sharing": "timeslice", "replicas": 2},
    {"name": "mig", "memory_gb": 4, "sharing": "mig"},
    {"name": "mps", "memory_gb": 8, "priority": "low", "replicas": 2},
])
def test_delete_releases_exactly_what_deploy_reserved(cluster, overrides):
    before = capacity_state()
    deployment = services.deploy(spec(**overrides), cluster=cluster)
    assert capacity_state() != before
    check_invariants()

    services.delete_deployment(deployment, cluster=cluster)

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.DELETED
    assert set(deployment.placements.values_list("status", flat=True)) == {PlacementStatus.RELEASED}
    assert capacity_state() == before
    assert cluster.list_objects("Deployment") == []
    check_invariants()


def test_delete_is_idempotent(cluster):
    deployment = services.deploy(spec(), cluster=cluster)
    services.delete_deployment(deployment, cluster=cluster)
    after = capacity_state()

    services.delete_deployment(deployment, cluster=cluster)

    assert capacity_state() == after


def test_delete_keeps_the_reservation_when_the_cluster_refuses(cluster):
    deployment = services.deploy(spec(), cluster=cluster)
    reserved = capacity_state()
    cluster.inject_fault("delete_workload", "apiserver unavailable")

    with pytest.raises(ClusterError, match="apiserver unavailable"):
        services.delete_deployment(deployment, cluster=cluster)

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.PLACED
    assert capacity_state() == reserved  # its pods may still run there


def test_a_workload_already_gone_does_not_block_the_delete(cluster):
    deployment = services.deploy(spec(), cluster=cluster)
    before_deploy_capacity = Partition.objects.filter(hold__isnull=False).count()
    cluster.delete_workload(deployment.namespace, deployment.placements.get().workload_name)

    services.delete_deployment(deployment, cluster=cluster)

    assert before_deploy_capacity == 1
    assert not Partition.objects.filter(hold__isnull=False).exists()
