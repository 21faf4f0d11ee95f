"""The reconciler's beat task: scheduled every ROLLOUT_RECONCILE_INTERVAL_S, one tick at a time."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.core.cache import cache
from django.db import connection, connections

from lifecycle.locks import advisory_key
from rollouts.choices import NodeState, RolloutStatus
from rollouts.control import act
from rollouts.creating import create_rollout, validate_request
from rollouts.tasks import RECONCILE_LOCK_KEY, reconcile_rollouts_task
from tests.rollouts.simulated import MPS_4, mps_cluster
from tests.scheduler.inventory import FakeClock

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_lock():
    cache.delete(RECONCILE_LOCK_KEY)
    yield
    cache.delete(RECONCILE_LOCK_KEY)


@contextmanager
def lock_held_elsewhere() -> Iterator[None]:
    """The tick lock held by another worker: on PostgreSQL another connection (its session), else the cache key."""
    if connection.vendor != "postgresql":
        cache.add(RECONCILE_LOCK_KEY, "another-tick", timeout=60)
        yield
        return
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [advisory_key(RECONCILE_LOCK_KEY)])
            assert cursor.fetchone()[0] is True
        yield
    finally:
        other.close()  # what a killed worker's connection does: the server drops its lock
        _wait_until_the_server_dropped_it()


def _wait_until_the_server_dropped_it(timeout_s: float = 10.0) -> None:
    """The server drops a closed session's locks as its backend process exits, which on a loaded
    machine can lag the client's close by a moment: wait for that, not for any expiry."""
    deadline = time.monotonic() + timeout_s
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s",
                           [advisory_key(RECONCILE_LOCK_KEY)])
            if cursor.fetchone()[0] == 0:
                return
            time.sleep(0.05)


def test_beat_runs_the_reconciler_every_interval():
    entry = settings.CELERY_BEAT_SCHEDULE["reconcile-rollouts"]
    assert entry["task"] == reconcile_rollouts_task.name
    assert entry["schedule"] == float(settings.ROLLOUT_RECONCILE_INTERVAL_S)


def test_a_tick_advances_a_running_rollout_and_releases_its_lock():
    cluster = mps_cluster(FakeClock(), node_count=2, deployments=1)
    rollout = act(create_rollout(validate_request("r", ["gpu-1"], MPS_4.as_dict())), "start", cluster=cluster)

    done = reconcile_rollouts_task()

    assert done == {str(rollout.pk): "batch 1"}
    assert rollout.nodes.get().state == NodeState.PREWARMING
    assert cache.get(RECONCILE_LOCK_KEY) is None


def test_a_tick_skips_while_another_holds_the_lock():
    cluster = mps_cluster(FakeClock(), node_count=2, deployments=1)
    rollout = act(create_rollout(validate_request("r", ["gpu-1"], MPS_4.as_dict())), "start", cluster=cluster)

    with lock_held_elsewhere():
        assert reconcile_rollouts_task()["skipped"] is True
        assert rollout.nodes.get().state == NodeState.PENDING
    rollout.refresh_from_db()
    assert rollout.status == RolloutStatus.RUNNING


@pytest.mark.postgres
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the advisory lock is PostgreSQL's (elsewhere it expires)")
def test_the_lock_of_a_worker_whose_connection_died_is_free_at_once():
    cluster = mps_cluster(FakeClock(), node_count=2, deployments=1)
    rollout = act(create_rollout(validate_request("r", ["gpu-1"], MPS_4.as_dict())), "start", cluster=cluster)
    with lock_held_elsewhere():
        assert reconcile_rollouts_task()["skipped"] is True

    # The holder's connection closed without unlocking (a SIGKILLed worker's does): no expiry to wait for.
    assert reconcile_rollouts_task() == {str(rollout.pk): "batch 1"}
    assert rollout.nodes.get().state == NodeState.PREWARMING
