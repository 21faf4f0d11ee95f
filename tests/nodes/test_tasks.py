"""sync_inventory_task: a thin Celery wrapper around the sync, guarded against overlapping runs."""
from __future__ import annotations

import os
import time
import uuid

import pytest
from celery.contrib.testing.worker import start_worker
from django.conf import settings
from django.core.cache import cache

from gpuplane.celery import app
from nodes.cluster.base import ClusterError
from nodes.cluster.sim import SimulatedCluster
from nodes.models import GPU, Node
from nodes.tasks import SYNC_LOCK_KEY, sync_inventory_task
from tests.redis_scratch import redis_celery_app


@pytest.fixture(autouse=True)
def free_lock():
    cache.delete(SYNC_LOCK_KEY)
    yield
    cache.delete(SYNC_LOCK_KEY)


@pytest.fixture
def cluster(isolated_cluster_state) -> SimulatedCluster:
    """The simulated cluster the task will read (the settings' state file), with one 2-GPU node."""
    simulated = SimulatedCluster(isolated_cluster_state)
    simulated.add_gpu_node("h100-node-1", product="NVIDIA-H100-80GB-HBM3", gpu_count=2, gpu_memory_mib=81559)
    return simulated


@pytest.mark.django_db
def test_it_syncs_the_configured_cluster_and_returns_the_report(cluster):
    result = sync_inventory_task.apply().get()

    assert result["created"] == {"nodes": 1, "gpus": 2, "partitions": 2}
    assert result["changed"] is True
    assert result["unknown_products"] == [] and result["unplaced_pods"] == []
    assert list(GPU.objects.filter(node__name="h100-node-1").values_list("index", flat=True)) == [0, 1]
    assert cache.get(SYNC_LOCK_KEY) is None  # released

    again = sync_inventory_task.apply().get()
    assert again["changed"] is False


@pytest.mark.django_db
def test_it_skips_while_another_sync_holds_the_lock(cluster):
    cache.add(SYNC_LOCK_KEY, "another-run", timeout=60)

    result = sync_inventory_task.apply().get()

    assert result == {"skipped": True, "reason": "another inventory sync is running"}
    assert not Node.objects.exists()
    assert cache.get(SYNC_LOCK_KEY) == "another-run"  # not ours to release

    cache.delete(SYNC_LOCK_KEY)
    assert sync_inventory_task.apply().get()["created"]["nodes"] == 1


@pytest.mark.django_db
def test_a_failed_sync_releases_the_lock_and_writes_nothing(cluster):
    cluster.inject_fault("list_nodes", "connection refused")

    result = sync_inventory_task.apply()

    assert result.failed()
    assert isinstance(result.result, ClusterError)
    assert cache.get(SYNC_LOCK_KEY) is None
    assert not Node.objects.exists()


def test_it_is_registered_under_the_name_beat_uses_with_time_limits():
    entry = settings.CELERY_BEAT_SCHEDULE["sync-inventory"]
    assert entry["task"] == sync_inventory_task.name == "nodes.tasks.sync_inventory_task"
    registered = app.tasks[entry["task"]]  # what a worker looks the beat message up by
    assert 0 < registered.soft_time_limit < registered.time_limit


@pytest.mark.redis
@pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs a Redis broker: set REDIS_URL=redis://127.0.0.1:6379/0")
@pytest.mark.django_db(transaction=True)  # the worker thread has its own connection: rows must be committed
def test_a_real_worker_runs_the_sync_sent_through_redis(cluster):
    # Keys and queue of our own (tests/redis_scratch.py): other test runs and a running `make run`
    # sharing this Redis neither take our message nor get one from us.
    queue = f"test-sync-inventory-{uuid.uuid4().hex[:12]}"
    with redis_celery_app("gpuplane-sync-test") as redis_app:
        assert redis_app.conf.broker_url.startswith("redis://")
        with start_worker(redis_app, pool="solo", perform_ping_check=False, queues=[queue], shutdown_timeout=30):
            redis_app.tasks[sync_inventory_task.name].apply_async(queue=queue)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and GPU.objects.filter(node__name="h100-node-1").count() < 2:
                time.sleep(0.2)

    assert GPU.objects.filter(node__name="h100-node-1").count() == 2
    assert Node.objects.get(name="h100-node-1").gpu_model == "H100-SXM5-80GB"


@pytest.mark.django_db
def test_a_sync_that_changed_something_refreshes_the_fleet_pages(cluster, monkeypatch):
    from nodes import tasks

    refreshed: list[bool] = []
    monkeypatch.setattr(tasks, "refresh_per_poll", lambda: refreshed.append(True))
    assert sync_inventory_task.apply().get()["changed"] is True
    assert refreshed == [True]
    assert sync_inventory_task.apply().get()["changed"] is False
    assert refreshed == [True]  # nothing changed: the figures under the same audit mark are still right
