"""Failure paths of the deploy pipeline: broker down, an ambiguous create, eager Celery.

These run with real commits (``transaction=True``): the watch is enqueued from an on-commit
hook, which a test wrapped in one transaction would never fire.
"""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError
from rest_framework.test import APIClient

from gpuplane.celery import app
from nodes.cluster.base import ClusterError
from nodes.cluster.sim import SimulatedCluster
from nodes.inventory.sync import sync_inventory
from nodes.models import Partition
from scheduler import services
from scheduler.choices import DeploymentStatus
from scheduler.models import Deployment
from scheduler.services import DeployFailed, DeploySpec
from scheduler.tasks import watch_deployment_task
from tests.scheduler.inventory import FakeClock, capacity_state, check_invariants, demo_cluster

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker_down(monkeypatch) -> list[int]:
    """Every enqueue of the watch task fails the way kombu does when Redis refuses connections."""
    attempts: list[int] = []

    def refuse(args, **options):
        attempts.append(args[0])
        raise BrokerError("Error 111 connecting to redis:6379. Connection refused.")

    monkeypatch.setattr(watch_deployment_task, "apply_async", refuse)
    return attempts


# ---- 1. the broker is down ---------------------------------------------------------------------


def test_a_broker_outage_does_not_fail_the_deploy(operator, broker_down, caplog):
    demo_cluster()
    client = APIClient()
    client.force_authenticate(operator)

    response = client.post("/api/v1/deployments/", {"name": "chat", "model": "m", "memory_gb": 40}, format="json")

    assert response.status_code == 201, response.content
    deployment = Deployment.objects.get()
    assert deployment.status == DeploymentStatus.PLACED  # its workload exists, its GPUs are held
    assert broker_down == [deployment.pk]  # the enqueue was tried, after the workloads existed
    assert Partition.objects.filter(hold__placement__deployment=deployment).exists()
    assert any("could not enqueue" in record.getMessage() and record.levelname == "WARNING"
               for record in caplog.records)


def test_the_sweeper_finishes_a_deployment_whose_watch_was_never_enqueued(operator, broker_down):
    demo_cluster()
    client = APIClient()
    client.force_authenticate(operator)
    response = client.post("/api/v1/deployments/", {"name": "chat", "model": "m", "memory_gb": 40}, format="json")
    deployment = Deployment.objects.get(pk=response.json()["id"])
    # The API's cluster binds pods on the wall clock; look at it a little later, when they are ready.
    later = SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE, clock=FakeClock(time.time() + 10))

    swept = services.sweep_deployments(
        now=timezone.now() + timedelta(seconds=settings.DEPLOYMENT_WATCH_INTERVAL_S + 1), cluster=later)

    assert swept == {deployment.pk: services.WATCH_RUNNING}
    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.RUNNING


def test_the_sweeper_times_out_and_releases_a_deployment_nobody_watches(operator, broker_down):
    cluster = demo_cluster()
    cluster.reset()  # the inventory stays, the cluster has no nodes: the pods stay Pending forever
    before = capacity_state()
    client = APIClient()
    client.force_authenticate(operator)
    response = client.post("/api/v1/deployments/", {"name": "chat", "model": "m", "memory_gb": 40}, format="json")
    assert response.status_code == 201
    deployment = Deployment.objects.get()
    assert capacity_state() != before

    late = deployment.placed_at + timedelta(seconds=settings.DEPLOYMENT_WATCH_TIMEOUT_S)
    assert services.sweep_deployments(now=late) == {deployment.pk: services.WATCH_FAILED}

    deployment.refresh_from_db()
    assert deployment.status == DeploymentStatus.FAILED
    assert capacity_state() == before
    assert cluster.list_objects("Deployment") == []
    check_invariants()


# ---- 2. the create timed out after the cluster stored the workload -----------------------------


def test_a_workload_stored_by_a_create_that_then_failed_is_deleted():
    clock = FakeClock()
    cluster = demo_cluster(clock)
    real_create = SimulatedCluster.create_workload

    def create_then_time_out(self, spec):
        real_create(self, spec)  # the API server stored it, then the answer was lost
        raise ClusterError("create deployment: cannot reach the Kubernetes API: Read timed out")

    cluster.create_workload = create_then_time_out.__get__(cluster)
    before = capacity_state()

    with pytest.raises(DeployFailed, match="Read timed out"):
        services.deploy(DeploySpec(name="orphan", model="m", memory_gb=40, priority="high", latency_slo_ms=50),
                        cluster=cluster)

    assert cluster.list_objects("Deployment") == []
    assert capacity_state() == before
    clock.advance(30)
    sync_inventory(cluster)  # no pod of a removed workload comes back to hold the GPU
    assert capacity_state() == before


def test_an_internal_error_mid_create_also_removes_the_workload_being_created():
    cluster = demo_cluster()
    real_create = SimulatedCluster.create_workload

    def create_then_crash(self, spec):
        real_create(self, spec)
        raise RuntimeError("worker interrupted")

    cluster.create_workload = create_then_crash.__get__(cluster)
    before = capacity_state()

    with pytest.raises(RuntimeError):
        services.deploy(DeploySpec(name="crash", model="m", memory_gb=8), cluster=cluster)

    assert cluster.list_objects("Deployment") == []
    assert capacity_state() == before
    assert Deployment.objects.get().status == DeploymentStatus.FAILED


# ---- 3. eager Celery ---------------------------------------------------------------------------


@pytest.fixture
def eager():
    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = False


def test_an_eager_watch_runs_once_after_the_workloads_exist(eager, monkeypatch):
    clock = FakeClock()
    cluster = demo_cluster(clock)
    seen: list[tuple[str, int]] = []
    real_watch = services.watch_deployment

    def watch(deployment_id, **options):
        deployment = Deployment.objects.get(pk=deployment_id)
        seen.append((deployment.status, len(cluster.list_objects("Deployment"))))
        return real_watch(deployment_id, **{"cluster": cluster, **options})

    monkeypatch.setattr(services, "watch_deployment", watch)

    deployment = services.deploy(DeploySpec(name="eager", model="m", memory_gb=8), cluster=cluster)

    # Once, on the placed deployment, and no inline retries (they would ignore their countdown).
    assert seen == [(DeploymentStatus.PLACED, 1)]
    assert deployment.status == DeploymentStatus.PLACED
    # The sweeper looks again later and sees it running.
    clock.advance(5)
    later = timezone.now() + timedelta(seconds=settings.DEPLOYMENT_WATCH_INTERVAL_S + 1)
    assert services.sweep_deployments(now=later, cluster=cluster) == {deployment.pk: services.WATCH_RUNNING}
