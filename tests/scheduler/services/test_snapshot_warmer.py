"""The web workers' snapshot warmer: ``SnapshotCache.keep_warm`` keeps the snapshot equal to a
rebuild, pays a full rebuild outside the cache's lock (deploys keep deciding meanwhile), catches
up what changed while it built, and leaves nothing for the next deploy to rebuild."""
from __future__ import annotations

import threading

import pytest
from django.db import connection

from nodes.models import GPU, Node
from scheduler.adapters import build_snapshot
from scheduler.services import snapshot_warmer, snapshots
from scheduler.services.snapshots import SnapshotCache
from tests.scheduler.services.test_snapshot_cache import assert_same

pytestmark = pytest.mark.django_db


def test_the_first_pass_builds_the_snapshot_so_the_first_deploy_does_not(cluster):
    cache = SnapshotCache()
    cache.keep_warm()
    assert cache.rebuilds == 1
    with cache.lease() as inventory:
        assert_same(inventory, build_snapshot())
    assert cache.rebuilds == 1


def test_a_small_change_is_applied_in_place(cluster):
    cache = SnapshotCache()
    cache.keep_warm()
    node = Node.objects.order_by("name").first()
    Node.objects.filter(pk=node.pk).update(cordoned=True)
    cache.keep_warm()
    assert (cache.rebuilds, cache.updates) == (1, 1)
    assert_same(cache.refresh(), build_snapshot())


def test_a_poll_that_changed_every_node_is_rebuilt_outside_the_lock_and_caught_up(cluster, monkeypatch):
    cache = SnapshotCache()
    cache.keep_warm()
    GPU.objects.update(utilization_pct=42.0)  # a telemetry poll: every node changed
    late = Node.objects.order_by("name").last()
    lock_free_while_building = []

    def building(**options):
        built = build_snapshot(**options)
        # Another thread (a deploy) can take the cache meanwhile...
        probe = threading.Thread(target=lambda: lock_free_while_building.append(_try_and_release(cache)))
        probe.start()
        probe.join()
        # ... and a change committed after the rows were read must still reach the snapshot.
        Node.objects.filter(pk=late.pk).update(labels={"late": "yes"})
        return built

    monkeypatch.setattr(snapshots, "build_snapshot", building)
    cache.keep_warm()
    monkeypatch.undo()

    assert lock_free_while_building == [True]
    assert cache.rebuilds == 2
    assert cache.inventory is not None
    assert {n.name: n for n in cache.inventory.snapshot.nodes}[late.name].labels.get("late") == "yes"
    with cache.lease() as inventory:
        assert_same(inventory, build_snapshot())
    assert cache.rebuilds == 2  # the deploy after the poll rebuilds nothing


def _try_and_release(cache: SnapshotCache) -> bool:
    taken = cache._lock.acquire(timeout=5)
    if taken:
        cache._lock.release()
    return taken


def test_without_the_change_log_nothing_is_kept(cluster):
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute('DROP TRIGGER gpuplane_snapshot_gpu_update ON "nodes_gpu"')
        else:
            cursor.execute("DROP TRIGGER gpuplane_snapshot_gpu_update")
    cache = SnapshotCache()
    cache.keep_warm()
    assert cache.inventory is None and cache.rebuilds == 0


def test_a_failed_pass_is_logged_and_the_next_one_works(cluster, monkeypatch, caplog):
    cache = SnapshotCache()

    def unreachable(*args, **kwargs):
        raise OSError("database unreachable")

    monkeypatch.setattr(snapshots, "read_changes", unreachable)
    assert snapshot_warmer.warm_once(cache) is False
    assert "could not bring the placement snapshot up to date" in caplog.text
    monkeypatch.undo()
    assert snapshot_warmer.warm_once(cache) is True
    assert_same(cache.refresh(), build_snapshot())


def test_an_interval_of_zero_starts_no_thread(settings):
    settings.SNAPSHOT_WARM_INTERVAL_S = 0
    assert snapshot_warmer.start() is None
