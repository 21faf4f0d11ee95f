"""place_replicas / release_replica: one replica of an existing deployment placed or removed.

The deploy pipeline places every replica through place_replicas (the rest of the suite covers
that path); here, replicas are added to and removed from a running deployment, as rolling
updates, consolidation and autoscaling will do.
"""
from __future__ import annotations

import pytest

from lifecycle.models import AuditEvent
from scheduler import services
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment, PartitionHold
from scheduler.services import DeployFailed, DeploySpec, NoCapacity
from tests.scheduler.inventory import FakeClock, capacity_state, check_invariants, demo_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def cluster(clock):
    return demo_cluster(clock)


def running(cluster, clock, **overrides) -> Deployment:
    values = {"name": "chat", "model": "llama-3-8b", "memory_gb": 8.0, "replicas": 2, "sharing": "mps"}
    values.update(overrides)
    deployment = services.deploy(DeploySpec(**values), cluster=cluster)
    clock.advance(5)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == services.WATCH_RUNNING
    deployment.refresh_from_db()
    return deployment


def workloads(cluster) -> dict[str, int]:
    """gpuplane's workloads on the cluster (the demo's own pods are not in Deployments of ours)."""
    return {d["metadata"]["name"]: d["spec"]["replicas"] for d in cluster.list_objects("Deployment")
            if "gpuplane.io/deployment" in d["metadata"].get("labels", {})}


def test_an_added_replica_gets_capacity_its_own_workload_and_is_watched_to_running(cluster, clock):
    deployment = running(cluster, clock)
    before = workloads(cluster)

    (placement,) = services.place_replicas(deployment, [2], cluster=cluster)

    assert placement.replica_index == 2
    assert placement.status == PlacementStatus.BINDING
    assert PartitionHold.objects.filter(placement=placement).count() == len(placement.gpu_indexes) == 1
    assert placement.workload_name == f"chat-{deployment.pk}-r2"
    assert workloads(cluster) == {**before, placement.workload_name: 1}
    deployment.refresh_from_db()
    # Both desired replicas still run: the deployment stays running while the extra one starts.
    assert deployment.status == DeploymentStatus.RUNNING
    assert deployment.decisions.filter(replica_index=2).count() == 1
    check_invariants()

    clock.advance(5)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == services.WATCH_RUNNING
    placement.refresh_from_db()
    assert placement.status == PlacementStatus.RUNNING
    assert AuditEvent.objects.filter(verb="placement.reserved", object_id=str(placement.pk)).exists()


def test_releasing_a_replica_scales_its_workload_down_then_deletes_it(cluster, clock):
    deployment = running(cluster, clock, replicas=3, memory_gb=4)
    names = dict(deployment.placements.values_list("replica_index", "workload_name"))
    shared = next(name for name in names.values() if list(names.values()).count(name) > 1)
    first, second = [index for index, name in sorted(names.items()) if name == shared][:2]
    size = list(names.values()).count(shared)
    held_before = PartitionHold.objects.filter(placement__deployment=deployment).count()

    assert services.release_replica(deployment, first, cluster=cluster, reason="moving it")

    assert workloads(cluster)[shared] == size - 1  # scaled down, not deleted
    assert PartitionHold.objects.filter(placement__deployment=deployment).count() == held_before - 1
    assert deployment.placements.get(replica_index=first).status == PlacementStatus.RELEASED
    event = AuditEvent.objects.get(verb="placement.released")
    assert event.reason == "moving it"
    check_invariants()

    for index in sorted(names):
        if index != first:
            assert services.release_replica(deployment, index, cluster=cluster)
    assert workloads(cluster) == {}
    assert not PartitionHold.objects.filter(placement__deployment=deployment).exists()
    assert not services.release_replica(deployment, second, cluster=cluster)  # nothing left to release
    check_invariants()


def test_replace_a_replica_elsewhere_then_release_the_original(cluster, clock):
    """What a rolling update does: start the replacement first, then remove the original."""
    deployment = running(cluster, clock, replicas=1)
    original = deployment.placements.get()

    index = services.next_replica_index(deployment)
    (replacement,) = services.place_replicas(deployment, [index], cluster=cluster)
    clock.advance(5)
    services.watch_deployment(deployment.pk, cluster=cluster)
    services.release_replica(deployment, original.replica_index, cluster=cluster)

    assert index == 1
    assert list(deployment.placements.filter(status=PlacementStatus.RUNNING).values_list("pk", flat=True)) == [
        replacement.pk]
    assert set(workloads(cluster)) == {replacement.workload_name}
    check_invariants()


def test_no_capacity_for_an_added_replica_stores_and_holds_nothing(cluster, clock):
    deployment = running(cluster, clock, replicas=1, memory_gb=60, sharing="exclusive")
    before = capacity_state()
    placements = deployment.placements.count()

    with pytest.raises(NoCapacity):
        services.place_replicas(deployment, [1], cluster=cluster, spec=DeploySpec(
            name="chat", model="m", memory_gb=4000, sharing="exclusive"))

    assert capacity_state() == before
    assert deployment.placements.count() == placements
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING


def test_a_refused_workload_releases_only_the_added_replica(cluster, clock):
    deployment = running(cluster, clock)
    before = capacity_state()
    cluster.inject_fault("create_workload", "quota exceeded")

    with pytest.raises(DeployFailed, match="quota exceeded"):
        services.place_replicas(deployment, [2], cluster=cluster)

    assert capacity_state() == before
    assert deployment.placements.get(replica_index=2).status == PlacementStatus.FAILED
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING
    assert deployment.placements.filter(status=PlacementStatus.RUNNING).count() == 2
    check_invariants()


@pytest.mark.parametrize("indexes, message", [([0], "already has replicas"), ([], "non-empty"), ([-1], "non-empty")])
def test_bad_replica_indexes_are_refused(cluster, clock, indexes, message):
    deployment = running(cluster, clock)

    with pytest.raises(ValueError, match=message):
        services.place_replicas(deployment, indexes, cluster=cluster)


def test_an_ended_deployment_gets_no_replicas(cluster, clock):
    deployment = running(cluster, clock)
    services.delete_deployment(deployment, cluster=cluster)

    with pytest.raises(ValueError, match="only an active deployment"):
        services.place_replicas(deployment, [5], cluster=cluster)


def test_deploy_delete_and_watch_leave_an_audit_trail(cluster, clock, operator):
    deployment = services.deploy(DeploySpec(name="web", model="m", memory_gb=8), user=operator, cluster=cluster)
    clock.advance(5)
    services.watch_deployment(deployment.pk, cluster=cluster)
    services.delete_deployment(deployment, user=operator, cluster=cluster)

    deployment_events = AuditEvent.objects.filter(object_type="scheduler.deployment", object_id=str(deployment.pk))
    assert list(deployment_events.order_by("id").values_list("verb", "actor")) == [
        ("deployment.created", operator.username),
        ("deployment.placed", "system:scheduler"),
        ("deployment.running", "system:deployment-watch"),
        ("deployment.deleted", operator.username),
    ]
    placement = deployment.placements.get()
    assert AuditEvent.objects.filter(object_type="scheduler.placement", object_id=str(placement.pk),
                                     verb="placement.reserved").exists()
