"""scheduler.services.snapshots with transactions that really commit: the deploy path's own cache
(``SNAPSHOTS``), a change it was never told about, and (PostgreSQL) a change log row that commits
after a higher one was already read."""
from __future__ import annotations

import threading

import pytest
from django.db import connection, connections
from django.db.models import F

from nodes.models import GPU, Node, Partition
from scheduler import services
from scheduler.adapters import build_snapshot
from scheduler.core import PlacementRequest, SharingRequest
from scheduler.models import Deployment, Placement
from scheduler.services import snapshots
from scheduler.services.deciding import placement_scheduler
from scheduler.services.snapshots import SNAPSHOTS, Changes, SnapshotCache
from tests.scheduler.inventory import check_invariants, empty_cluster, whole_gpu_cluster
from tests.scheduler.services.specs import spec
from tests.scheduler.services.test_snapshot_cache import assert_same

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_cache(no_watch):
    SNAPSHOTS.invalidate()
    yield
    SNAPSHOTS.invalidate()


def deploy(name: str) -> Placement:
    deployment = services.deploy(spec(name=name, sharing="exclusive", memory_gb=40), cluster=empty_cluster())
    (placement,) = deployment.placements.all()
    return placement


def test_deploys_share_one_snapshot_updated_node_by_node():
    whole_gpu_cluster(16, gpus_per_node=3, busy_per_node=1)  # 8 nodes, 2 free GPUs each
    deploy("one")
    rebuilds = SNAPSHOTS.rebuilds
    # An outside writer cordons the node the next decision would choose; the next deploys must see it.
    request = PlacementRequest(key="probe", memory_mib=40 * 1024, sharing=SharingRequest.EXCLUSIVE)
    chosen = placement_scheduler().schedule(request, build_snapshot().snapshot, reserve=False).assignment.node
    Node.objects.filter(name=chosen).update(cordoned=True)

    second, third = deploy("two"), deploy("three")

    assert chosen not in (second.node.name, third.node.name)
    assert SNAPSHOTS.rebuilds == rebuilds  # brought up to date, not rebuilt
    assert SNAPSHOTS.updates >= 2
    with SNAPSHOTS.lease() as inventory:
        assert inventory.snapshot.nodes[inventory.snapshot.index[chosen]].cordoned
        assert_same(inventory, build_snapshot())
    check_invariants()


def test_a_decision_on_a_stale_snapshot_fails_its_claim_and_the_retry_sees_the_change(monkeypatch):
    whole_gpu_cluster(2, gpus_per_node=2, busy_per_node=1)  # 2 nodes, 1 free GPU each
    deploy("warm")  # takes one of the two free GPUs; the cache is built
    (free,) = Partition.objects.filter(pod="", hold__isnull=True)
    # A change the log never told the cache about (as if a trigger were missing): a pod takes the
    # last free GPU, and reading the log finds nothing.
    Partition.objects.filter(pk=free.pk).update(pod="other/sneaky")
    GPU.objects.filter(pk=free.gpu_id).update(allocated_milli=1000, allocated_memory_mib=F("memory_mib"))
    monkeypatch.setattr(snapshots, "read_changes", lambda generation, pending: Changes(newest=generation))

    with pytest.raises(services.NoCapacity):
        deploy("late")

    assert Deployment.objects.filter(name="late").count() == 0
    assert Partition.objects.get(pk=free.pk).pod == "other/sneaky"
    check_invariants()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite serialises writers: no id commits late")
def test_a_log_row_that_commits_after_a_higher_one_was_read_is_not_missed():
    whole_gpu_cluster(40, gpus_per_node=3, busy_per_node=1)  # 20 nodes: one changed is no reason to rebuild
    slow, fast = Node.objects.order_by("name")[:2]
    cache = SnapshotCache()
    cache.refresh()
    written, release = threading.Event(), threading.Event()

    def slow_writer():
        from django.db import transaction

        try:
            with transaction.atomic():
                Node.objects.filter(pk=slow.pk).update(cordoned=True)  # takes a log id now
                written.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert written.wait(10)
    Node.objects.filter(pk=fast.pk).update(labels={"later": "yes"})  # a higher id, committed first
    seen = cache.refresh().snapshot
    assert seen.nodes[seen.index[fast.name]].labels == {"later": "yes"}
    assert not seen.nodes[seen.index[slow.name]].cordoned  # not committed yet
    release.set()
    thread.join()

    inventory = cache.refresh()
    assert inventory.snapshot.nodes[inventory.snapshot.index[slow.name]].cordoned
    assert_same(inventory, build_snapshot())
    assert cache.rebuilds == 1
