"""A running deployment that gains an extra replica (a rollout's pre-warmed copy) stays running:
only the new replica waits for the watch, which marks it running once ready, or gives it up alone
when it never is. A deployment short of its desired replicas still goes back to placed."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from lifecycle.models import AuditEvent
from scheduler import services
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment, PartitionHold
from scheduler.services import DeploySpec
from tests.scheduler.inventory import FakeClock, check_invariants, demo_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def cluster(clock):
    return demo_cluster(clock)


def running(cluster, clock, replicas: int = 1) -> Deployment:
    deployment = services.deploy(DeploySpec(name="chat", model="m", memory_gb=8.0, replicas=replicas,
                                            sharing="mps"), cluster=cluster)
    clock.advance(5)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == services.WATCH_RUNNING
    deployment.refresh_from_db()
    return deployment


def deployment_verbs(deployment: Deployment) -> list[str]:
    return list(AuditEvent.objects.filter(object_type="scheduler.deployment", object_id=str(deployment.pk))
                .order_by("pk").values_list("verb", flat=True))


def test_a_running_deployment_stays_running_while_its_copy_starts_and_the_watch_marks_the_copy_running(
        cluster, clock):
    deployment = running(cluster, clock)
    verbs = deployment_verbs(deployment)

    (copy,) = services.place_replicas(deployment, [1], cluster=cluster)

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING and copy.status == PlacementStatus.BINDING
    assert deployment_verbs(deployment) == verbs  # no placed: it never stopped serving
    # Not ready yet (pods are ready 2 s after binding): still running, the copy waiting.
    assert services.watch_deployment(deployment.pk, cluster=cluster) == services.WATCH_WAITING
    copy.refresh_from_db()
    assert copy.status == PlacementStatus.BINDING

    clock.advance(5)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == services.WATCH_RUNNING
    copy.refresh_from_db()
    deployment.refresh_from_db()
    assert copy.status == PlacementStatus.RUNNING and deployment.status == DeploymentStatus.RUNNING
    assert AuditEvent.objects.filter(verb="placement.running", object_id=str(copy.pk)).count() == 1
    assert deployment_verbs(deployment) == verbs
    # Nothing left starting: a later look has nothing to do.
    assert services.watch_deployment(deployment.pk, cluster=cluster) == DeploymentStatus.RUNNING
    check_invariants()


def test_a_copy_never_ready_is_released_alone_and_the_deployment_keeps_running(cluster, clock, settings):
    deployment = running(cluster, clock)
    original = deployment.placements.get()
    (copy,) = services.place_replicas(deployment, [1], cluster=cluster)
    later = timezone.now() + timedelta(seconds=settings.DEPLOYMENT_WATCH_TIMEOUT_S + 1)

    assert services.watch_deployment(deployment.pk, cluster=cluster, now=later) == services.WATCH_RUNNING

    copy.refresh_from_db()
    original.refresh_from_db()
    deployment.refresh_from_db()
    assert copy.status == PlacementStatus.RELEASED and not PartitionHold.objects.filter(placement=copy).exists()
    assert original.status == PlacementStatus.RUNNING and deployment.status == DeploymentStatus.RUNNING
    assert copy.workload_name not in {d["metadata"]["name"] for d in cluster.list_objects("Deployment")}
    released = AuditEvent.objects.get(verb="placement.released", object_id=str(copy.pk))
    assert "not ready" in released.reason and "other replicas" in released.reason
    check_invariants()


def test_the_sweeper_watches_a_running_deployment_whose_copy_is_starting(cluster, clock, settings):
    deployment = running(cluster, clock)
    (copy,) = services.place_replicas(deployment, [1], cluster=cluster)
    clock.advance(5)
    later = timezone.now() + timedelta(seconds=settings.DEPLOYMENT_WATCH_INTERVAL_S + 1)

    assert services.sweep_deployments(later, cluster=cluster) == {deployment.pk: services.WATCH_RUNNING}

    copy.refresh_from_db()
    assert copy.status == PlacementStatus.RUNNING
    assert services.sweep_deployments(later + timedelta(hours=1), cluster=cluster) == {}


def test_a_deployment_short_of_its_desired_replicas_goes_back_to_placed_until_the_new_one_is_ready(cluster, clock):
    deployment = running(cluster, clock, replicas=2)
    services.release_replica(deployment, 0, cluster=cluster, reason="lost")  # one of two left running

    (replacement,) = services.place_replicas(deployment, [2], cluster=cluster)

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.PLACED
    clock.advance(5)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == services.WATCH_RUNNING
    replacement.refresh_from_db()
    deployment.refresh_from_db()
    assert replacement.status == PlacementStatus.RUNNING and deployment.status == DeploymentStatus.RUNNING
