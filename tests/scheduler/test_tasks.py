"""Watching a deployment until it runs (scheduler.services.watch_deployment and its task)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import services, tasks
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment
from scheduler.services import DeploySpec
from scheduler.tasks import WorkloadNotReady, watch_deployment_task
from tests.scheduler.inventory import FakeClock, capacity_state, demo_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cluster(clock):
    return demo_cluster(clock)


def deploy(cluster, **fields) -> Deployment:
    return services.deploy(DeploySpec(**{"name": "chat", "model": "m", "memory_gb": 8, **fields}), cluster=cluster)


def test_it_marks_the_deployment_running_once_every_workload_is_ready(cluster, clock):
    deployment = deploy(cluster, replicas=3)

    assert services.watch_deployment(deployment.pk, cluster=cluster) == "waiting"  # pods start in 2 s
    clock.advance(3)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == "running"

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING
    assert set(deployment.placements.values_list("status", flat=True)) == {PlacementStatus.RUNNING}
    # A second look changes nothing.
    assert services.watch_deployment(deployment.pk, cluster=cluster) == "running"


def test_it_fails_and_releases_a_deployment_not_ready_in_time(settings, clock):
    cluster = demo_cluster(clock)
    cluster.reset()  # the inventory stays, the cluster has no nodes: its pods stay Pending forever
    before = capacity_state()
    deployment = deploy(cluster)
    settings.DEPLOYMENT_WATCH_TIMEOUT_S = 60

    soon = deployment.placed_at + timedelta(seconds=59)
    assert services.watch_deployment(deployment.pk, cluster=cluster, now=soon) == "waiting"
    late = deployment.placed_at + timedelta(seconds=60)
    assert services.watch_deployment(deployment.pk, cluster=cluster, now=late) == "failed"

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.FAILED
    assert "not ready 60 s after placement" in deployment.message
    assert capacity_state() == before
    assert cluster.list_objects("Deployment") == []  # its workload was deleted


def test_a_deployment_never_placed_is_failed_after_the_timeout(cluster, settings):
    deployment = deploy(cluster)
    # As if the deploying process died between reservation and workload creation.
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.PENDING, placed_at=None)
    settings.DEPLOYMENT_WATCH_TIMEOUT_S = 30

    late = timezone.now() + timedelta(seconds=31)
    assert services.watch_deployment(deployment.pk, cluster=cluster, now=late) == "failed"

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.FAILED and "never placed" in deployment.message
    assert not deployment.placements.filter(partitions__isnull=False).exists()


def test_a_vanished_workload_fails_the_deployment(cluster):
    deployment = deploy(cluster)
    cluster.delete_workload(deployment.namespace, deployment.placements.get().workload_name)

    assert services.watch_deployment(deployment.pk, cluster=cluster) == "failed"

    deployment.refresh_from_db()
    assert "disappeared" in deployment.message


def test_deleted_or_missing_deployments_need_no_watching(cluster):
    deployment = deploy(cluster)
    services.delete_deployment(deployment, cluster=cluster)

    assert services.watch_deployment(deployment.pk, cluster=cluster) == "deleted"
    assert services.watch_deployment(123456, cluster=cluster) == "gone"


def test_the_watch_is_enqueued_when_the_reservation_commits(cluster, django_capture_on_commit_callbacks, monkeypatch):
    enqueued: list[tuple] = []
    monkeypatch.setattr(watch_deployment_task, "apply_async", lambda args, countdown: enqueued.append((args, countdown)))

    with django_capture_on_commit_callbacks(execute=True):
        deployment = deploy(cluster)

    assert enqueued == [((deployment.pk,), 5)]


def test_a_conflicting_attempt_enqueues_nothing(cluster, django_capture_on_commit_callbacks, monkeypatch):
    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(services.NoCapacity):
            deploy(cluster, memory_gb=500)

    assert callbacks == []


def test_the_task_retries_by_declaration_until_the_timeout_is_covered(settings):
    assert WorkloadNotReady in watch_deployment_task.autoretry_for
    assert watch_deployment_task.max_retries * watch_deployment_task.default_retry_delay >= (
        settings.DEPLOYMENT_WATCH_TIMEOUT_S)
    assert watch_deployment_task.acks_late


def test_the_task_returns_the_outcome_and_raises_to_retry_while_waiting(monkeypatch):
    outcomes = iter(["waiting", "waiting", "running"])
    seen: list[int] = []

    def watch(deployment_id):
        seen.append(deployment_id)
        return next(outcomes)

    monkeypatch.setattr(tasks.services, "watch_deployment", watch)

    result = watch_deployment_task.apply(args=(7,))  # eager: retries run at once

    assert result.get() == "running"
    assert seen == [7, 7, 7]


def test_the_task_watches_the_configured_cluster_end_to_end(clock, monkeypatch):
    cluster = demo_cluster(clock)
    deployment = deploy(cluster)
    clock.advance(5)
    monkeypatch.setattr(services, "get_cluster", lambda: cluster)

    assert watch_deployment_task.apply(args=(deployment.pk,)).get() == "running"
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING
