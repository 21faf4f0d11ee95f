"""Namespace quotas: the NamespaceQuota model, the usage it is checked against, and enforcement.

The race between concurrent deploys in one namespace is in test_concurrency.py (PostgreSQL).
"""
from __future__ import annotations

from dataclasses import replace

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError
from rest_framework.test import APIClient

from nodes.models import Partition
from scheduler import adapters, services
from scheduler.choices import DeploymentStatus
from scheduler.core import QuotaUsage
from scheduler.models import Deployment, NamespaceQuota
from scheduler.services import DeploySpec, NoCapacity, placing
from tests.scheduler.inventory import (
    check_invariants,
    demo_cluster,
    empty_cluster,
    set_utilization,
    whole_gpu_cluster,
)

pytestmark = pytest.mark.django_db

GIB = 1024


@pytest.fixture
def cluster():
    whole_gpu_cluster(8, busy_per_node=0)  # one exclusive node of 8 free H100s
    return empty_cluster()


def deploy(cluster, name: str, namespace: str = "team-a", **fields) -> Deployment:
    values = {"model": "m", "memory_gb": 40, "sharing": "exclusive", "allow_default_scheduler": False, **fields}
    return services.deploy(DeploySpec(name=name, namespace=namespace, **values), cluster=cluster)


# ---- the usage a quota is checked against ------------------------------------------------------


def test_a_namespace_without_a_quota_is_unlimited(cluster):
    deploy(cluster, "a")
    assert adapters.namespace_quota("team-a") is None


def test_usage_counts_what_the_namespaces_active_placements_hold(cluster):
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=8000, max_memory_mib=400 * GIB)
    deploy(cluster, "pair", gpu_count=2, memory_gb=60)  # 2 whole GPUs, 60 GB asked
    deploy(cluster, "one")  # 1 whole GPU, 40 GB
    deleted = deploy(cluster, "gone")
    services.delete_deployment(deleted, cluster=cluster)  # released: no longer counted
    deploy(cluster, "elsewhere", namespace="team-b")  # another namespace

    assert adapters.namespace_quota("team-a") == QuotaUsage(
        gpu_milli_limit=8000, gpu_milli_used=3000, memory_mib_limit=400 * GIB, memory_mib_used=100 * GIB)


def test_usage_counts_the_share_held_not_whole_gpus():
    demo_cluster()
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=4000)
    deployment = services.deploy(DeploySpec(name="small", model="m", memory_gb=8, priority="low",
                                            workload_type="batch", namespace="team-a"), cluster=empty_cluster())
    held = sum(Partition.objects.filter(hold__placement__deployment=deployment).values_list("share_milli", flat=True))

    assert 0 < held < 1000  # an MPS share, not a whole GPU
    assert adapters.namespace_quota("team-a").gpu_milli_used == held


def test_the_namespace_is_unique():
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=1000)
    with pytest.raises(IntegrityError):
        NamespaceQuota.objects.create(namespace="team-a", max_memory_mib=1)


# ---- enforcement -------------------------------------------------------------------------------


def test_a_gpu_quota_stops_deploys_at_the_limit_and_only_in_its_namespace(cluster):
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=2000)
    deploy(cluster, "a1")
    deploy(cluster, "a2")

    with pytest.raises(NoCapacity) as raised:
        deploy(cluster, "a3")

    assert "would take the namespace over its GPU quota" in raised.value.message
    assert Deployment.objects.filter(namespace="team-a").count() == 2  # nothing stored for a3
    deploy(cluster, "b1", namespace="team-b")  # free GPUs are left; other namespaces are not limited
    check_invariants()


def test_deleting_a_deployment_gives_its_quota_back(cluster):
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=1000)
    first = deploy(cluster, "a1")
    with pytest.raises(NoCapacity):
        deploy(cluster, "a2")

    services.delete_deployment(first, cluster=cluster)

    assert deploy(cluster, "a2").status == DeploymentStatus.PLACED


def test_replicas_of_one_request_count_against_the_quota_together(cluster):
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=2000)

    with pytest.raises(NoCapacity, match="would take the namespace over its GPU quota") as raised:
        deploy(cluster, "three", replicas=3)

    assert raised.value.replica_index == 2
    assert not Deployment.objects.exists()  # all or nothing
    assert deploy(cluster, "two", replicas=2).placements.count() == 2


def test_a_memory_quota_counts_what_the_replicas_ask_for(cluster):
    NamespaceQuota.objects.create(namespace="team-a", max_memory_mib=100 * GIB)
    deploy(cluster, "a1", memory_gb=60)

    with pytest.raises(NoCapacity, match="namespace memory quota exceeded"):
        deploy(cluster, "a2", memory_gb=41)
    assert deploy(cluster, "a3", memory_gb=40).status == DeploymentStatus.PLACED


def test_the_reservation_rechecks_the_quota_it_decided_on(cluster, monkeypatch):
    """A decision made on a stale usage (another deploy committed meanwhile) is not reserved."""
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=1000)
    deploy(cluster, "a1")
    real = adapters.namespace_quota
    reads: list[QuotaUsage | None] = []

    def stale_then_real(namespace):
        quota = real(namespace)
        if not reads:  # the optimistic decision sees the namespace as it was before a1
            quota = replace(quota, gpu_milli_used=0, memory_mib_used=0)
        reads.append(quota)
        return quota

    monkeypatch.setattr(placing, "namespace_quota", stale_then_real)

    with pytest.raises(NoCapacity, match="would take the namespace over its GPU quota"):
        deploy(cluster, "a2")

    assert len(reads) >= 2  # decided again, under the lock, on the real usage
    assert list(Deployment.objects.values_list("name", flat=True)) == ["a1"]
    check_invariants()


def test_a_reservation_with_or_without_a_quota_takes_the_placement_lock_alone(cluster, monkeypatch):
    """Decisions are serialised (scheduler.services.capacity): with a quota, two reservations side
    by side could both pass the re-check; without one, they would race for the same capacity. The
    races themselves are in test_concurrency.py (PostgreSQL)."""
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=8000)
    modes: list[bool] = []
    real_lock = placing.placement_lock

    def lock(*, exclusive):
        modes.append(exclusive)
        real_lock(exclusive=exclusive)

    monkeypatch.setattr(placing, "placement_lock", lock)

    deploy(cluster, "a1")
    deploy(cluster, "b1", namespace="team-b")

    assert modes == [True, True]


def test_a_namespace_with_a_quota_is_not_handed_to_the_default_scheduler(cluster):
    """What the default scheduler gives is not charged to the quota, so it would be a way around it."""
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=8000)
    set_utilization("", 95.0)  # busy by telemetry: elsewhere this is handed over

    with pytest.raises(NoCapacity, match="utilization"):
        deploy(cluster, "busy", allow_default_scheduler=True)

    assert not Deployment.objects.exists()
    assert deploy(cluster, "busy", namespace="team-b", allow_default_scheduler=True).placements.get().node is None


def test_skipping_gpu_selection_is_refused_in_a_namespace_with_a_quota(cluster):
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=8000)

    with pytest.raises(NoCapacity, match="has a quota, so GPU selection cannot be skipped"):
        deploy(cluster, "skip", enable_gpu_selection=False)

    assert not Deployment.objects.exists()
    assert deploy(cluster, "skip", namespace="team-b", enable_gpu_selection=False).status == DeploymentStatus.PLACED


def test_the_api_answers_409_naming_the_quota(cluster, operator):
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=500)
    client = APIClient()
    client.force_authenticate(operator)

    response = client.post("/api/v1/deployments/", {"name": "big", "model": "m", "memory_gb": 40,
                                                    "namespace": "team-a", "sharing": "exclusive"}, format="json")

    assert response.status_code == 409
    body = response.json()
    assert body["reason"] == "namespace GPU quota exceeded"
    assert body["detail"].startswith("1 node would take the namespace over its GPU quota")
    assert "team-a: 0 GPUs in use + 1 GPU here would exceed the limit of 0.5 GPU" in body["detail"]
    assert body["decision"]["outcome"] == "unschedulable"
    assert not Deployment.objects.exists()


def test_quotas_are_managed_in_the_admin(client):
    client.force_login(User.objects.create_superuser("root", password="pw-not-used"))
    NamespaceQuota.objects.create(namespace="team-a", max_gpu_milli=2000)

    response = client.get("/admin/scheduler/namespacequota/")

    assert response.status_code == 200
    assert b"team-a" in response.content
