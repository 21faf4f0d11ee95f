"""Watching a deployment until it runs (scheduler.services.watch_deployment and its task)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from nodes.cluster.base import ClusterError
from scheduler import services, tasks
from scheduler.choices import DeploymentStatus, PlacementStatus
from scheduler.models import Deployment
from scheduler.services import DeploySpec, watching
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
    assert not deployment.placements.filter(holds__isnull=False).exists()


def test_a_vanished_workload_fails_the_deployment(cluster):
    deployment = deploy(cluster)
    cluster.delete_workload(deployment.namespace, deployment.placements.get().workload_name)

    assert services.watch_deployment(deployment.pk, cluster=cluster) == "failed"

    deployment.refresh_from_db()
    assert "disappeared" in deployment.message


def test_a_replica_moved_off_its_node_is_not_a_vanished_workload(cluster, clock):
    # A rolling update places a copy (the deployment is PLACED again) and releases the original,
    # deleting its workload, before the watch looks: the copy's readiness is all that counts.
    deployment = deploy(cluster)
    clock.advance(3)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == "running"
    original = deployment.placements.get()
    deployment.refresh_from_db()
    services.place_replicas(deployment, [1], cluster=cluster)
    services.release_replica(deployment, original.replica_index, cluster=cluster)

    assert services.watch_deployment(deployment.pk, cluster=cluster) == "waiting"
    clock.advance(3)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == "running"
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING


def test_a_replica_released_while_the_watch_looks_is_not_a_vanished_workload(cluster, clock):
    # A placed deployment (not ready yet): the watch read the workload names, then a rolling
    # update released the original replica (its workload deleted) before the watch asked the
    # cluster about it. (A running one keeps running while a copy starts: the watch then looks
    # only at the copy.)
    deployment = deploy(cluster)
    assert deployment.status == DeploymentStatus.PLACED
    original = deployment.placements.get()
    deployment.refresh_from_db()
    services.place_replicas(deployment, [1], cluster=cluster)

    class ReleasedMidLook(type(cluster)):
        def workload_ready(self, namespace, name):
            if name == original.workload_name:
                services.release_replica(Deployment.objects.get(pk=deployment.pk), original.replica_index,
                                         cluster=cluster)
            return super().workload_ready(namespace, name)

    racing = ReleasedMidLook(cluster.state_file.path, clock=clock)
    assert services.watch_deployment(deployment.pk, cluster=racing) == "waiting"
    clock.advance(3)
    assert services.watch_deployment(deployment.pk, cluster=cluster) == "running"
    assert len(cluster.list_objects("Deployment")) == 1  # the copy's workload, left alone


def test_deleted_or_missing_deployments_need_no_watching(cluster):
    deployment = deploy(cluster)
    services.delete_deployment(deployment, cluster=cluster)

    assert services.watch_deployment(deployment.pk, cluster=cluster) == "deleted"
    assert services.watch_deployment(123456, cluster=cluster) == "gone"


@pytest.mark.django_db(transaction=True)  # real commits: on-commit hooks run when they happen
def test_the_watch_is_enqueued_once_the_workloads_exist(cluster, monkeypatch):
    enqueued: list[tuple] = []

    def enqueue(args, countdown):
        deployment = Deployment.objects.get(pk=args[0])
        enqueued.append((args, countdown, deployment.status, len(cluster.list_objects("Deployment"))))

    monkeypatch.setattr(watch_deployment_task, "apply_async", enqueue)

    deployment = deploy(cluster)

    # Not when the reservation commits: an eager watch would then run before the workloads exist.
    assert enqueued == [((deployment.pk,), 5, DeploymentStatus.PLACED, 1)]


def test_a_refused_deploy_enqueues_no_watch(cluster, django_capture_on_commit_callbacks):
    cluster.inject_fault("create_workload", "admission webhook denied the request")

    with django_capture_on_commit_callbacks() as callbacks:
        with pytest.raises(services.DeployFailed):
            deploy(cluster)

    assert callbacks == []


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
    monkeypatch.setattr(watching, "get_cluster", lambda: cluster)

    assert watch_deployment_task.apply(args=(deployment.pk,)).get() == "running"
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING


# ---- the sweeper -------------------------------------------------------------------------------


def test_a_look_records_when_it_was_made(cluster):
    deployment = deploy(cluster)
    assert deployment.watched_at is None
    moment = timezone.now() + timedelta(seconds=1)

    services.watch_deployment(deployment.pk, cluster=cluster, now=moment)

    deployment.refresh_from_db()
    assert deployment.watched_at == moment


def test_the_sweeper_looks_at_active_deployments_not_looked_at_for_an_interval(cluster, clock, settings):
    settings.DEPLOYMENT_WATCH_INTERVAL_S = 5
    now = timezone.now() + timedelta(minutes=1)
    stale = deploy(cluster, name="stale")
    Deployment.objects.filter(pk=stale.pk).update(watched_at=now - timedelta(seconds=6))
    fresh = deploy(cluster, name="fresh")  # its watch task is doing its job
    Deployment.objects.filter(pk=fresh.pk).update(watched_at=now - timedelta(seconds=4))
    never = deploy(cluster, name="never")  # never looked at: counts from its creation
    Deployment.objects.filter(pk=never.pk).update(created_at=now - timedelta(seconds=6))
    young = deploy(cluster, name="young")  # never looked at, but created within the interval
    Deployment.objects.filter(pk=young.pk).update(created_at=now - timedelta(seconds=4))
    done = deploy(cluster, name="done")
    services.delete_deployment(done, cluster=cluster)
    Deployment.objects.filter(pk=done.pk).update(created_at=now - timedelta(hours=1))
    clock.advance(3)  # every pod is ready

    swept = services.sweep_deployments(now=now, cluster=cluster)

    assert swept == {stale.pk: "running", never.pk: "running"}
    statuses = dict(Deployment.objects.values_list("name", "status"))
    assert statuses == {"stale": "running", "never": "running", "fresh": "placed", "young": "placed",
                        "done": "deleted"}
    for name in ("stale", "never"):
        assert Deployment.objects.get(name=name).watched_at == now


def test_the_sweeper_fails_a_deployment_left_pending_by_a_dead_process(cluster, settings):
    before = capacity_state()
    deployment = deploy(cluster)
    Deployment.objects.filter(pk=deployment.pk).update(status=DeploymentStatus.PENDING, placed_at=None)

    late = deployment.created_at + timedelta(seconds=settings.DEPLOYMENT_WATCH_TIMEOUT_S)
    assert services.sweep_deployments(now=late, cluster=cluster) == {deployment.pk: "failed"}

    assert Deployment.objects.get().status == DeploymentStatus.FAILED
    assert capacity_state() == before
    assert cluster.list_objects("Deployment") == []


def test_a_cluster_error_on_one_deployment_does_not_stop_the_sweep(cluster, clock, monkeypatch):
    first = deploy(cluster, name="first")
    second = deploy(cluster, name="second")
    clock.advance(3)
    real_ready = type(cluster).workload_ready

    def ready(self, namespace, name):
        if name.startswith("first"):
            raise ClusterError("cannot reach the Kubernetes API")
        return real_ready(self, namespace, name)

    monkeypatch.setattr(type(cluster), "workload_ready", ready)
    later = timezone.now() + timedelta(minutes=1)

    assert services.sweep_deployments(now=later, cluster=cluster) == {first.pk: "error", second.pk: "running"}


def test_the_sweep_task_delegates_and_counts_outcomes(monkeypatch):
    monkeypatch.setattr(tasks.services, "sweep_deployments", lambda: {3: "running", 4: "running", 9: "failed"})

    assert tasks.sweep_deployments_task.apply().get() == {"running": 2, "failed": 1}


def test_beat_runs_the_sweeper_every_30_s(settings):
    task = "scheduler.tasks.sweep_deployments_task"
    (entry,) = [e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == task]
    assert entry["schedule"] == 30.0
    assert entry["options"]["expires"] == 27.0
    assert tasks.sweep_deployments_task.name == "scheduler.tasks.sweep_deployments_task"
