"""scheduler.services.snapshots: the long-lived snapshot, brought up to date from the change log,
always equals a snapshot rebuilt from the database (random sequences of reservations, releases,
node and GPU changes, pods, rolled-back decisions, nodes added and removed)."""
from __future__ import annotations

import random

import numpy as np
import pytest
from django.db import connection

from nodes.models import GPU, Node, Partition
from scheduler import services, snapshot_triggers
from scheduler.adapters import InventorySnapshot, build_snapshot
from scheduler.core import PlacementRequest, SharingRequest
from scheduler.models import Deployment, SnapshotChange
from scheduler.services import NoCapacity, placing
from scheduler.services.deciding import placement_scheduler
from scheduler.services.snapshots import SnapshotCache, read_changes, trim_changes
from tests.nodes.factories import make_node
from tests.scheduler.services.specs import spec

pytestmark = pytest.mark.django_db

SHARINGS = ("auto", "exclusive", "mps", "mig", "timeslice")


def assert_same(cached: InventorySnapshot, rebuilt: InventorySnapshot) -> None:
    assert cached.snapshot.names == rebuilt.snapshot.names
    assert cached.snapshot.nodes == rebuilt.snapshot.nodes
    assert cached.index == rebuilt.index
    ours, theirs = cached.snapshot.columns(), rebuilt.snapshot.columns()
    assert ours.keys() == theirs.keys()
    for name, column in ours.items():
        np.testing.assert_array_equal(column, theirs[name], err_msg=name)
    for pair in {pair for node in rebuilt.snapshot.nodes for pair in node.labels.items()}:
        np.testing.assert_array_equal(cached.snapshot.label_mask(dict([pair])),
                                      rebuilt.snapshot.label_mask(dict([pair])))


def logged_nodes(after: int) -> set[int]:
    return set(SnapshotChange.objects.filter(id__gt=after).values_list("node_id", flat=True))


def newest() -> int:
    return SnapshotChange.objects.order_by("-id").values_list("id", flat=True).first() or 0


# ---- the log -----------------------------------------------------------------------------------


def test_every_trigger_is_installed():
    assert snapshot_triggers.installed(connection)


def test_each_watched_write_logs_its_node_and_a_no_op_logs_nothing(cluster):
    node = Node.objects.order_by("name").first()
    gpu = GPU.objects.filter(node=node).order_by("index").first()
    partition = Partition.objects.filter(gpu=gpu).first()

    mark = newest()
    Node.objects.filter(pk=node.pk).update(cordoned=True)
    assert logged_nodes(mark) == {node.pk}

    mark = newest()
    GPU.objects.filter(pk=gpu.pk).update(utilization_pct=55.0)
    Partition.objects.filter(pk=partition.pk).update(pod="ml/other")
    assert logged_nodes(mark) == {node.pk}

    mark = newest()
    Node.objects.filter(pk=node.pk).update(cordoned=True, last_seen=None)  # same capacity picture
    GPU.objects.filter(pk=gpu.pk).update(temperature_c=71.0)  # a column the snapshot does not read
    assert logged_nodes(mark) == set()

    mark = newest()
    services.deploy(spec(name="logged", sharing="exclusive", memory_gb=40), cluster=cluster)
    (placement,) = Deployment.objects.get(name="logged").placements.all()
    assert logged_nodes(mark) == {placement.node_id}


def test_read_changes_names_each_changed_node_once_and_where_the_log_stands(cluster):
    nodes = list(Node.objects.order_by("name")[:2])
    mark = newest()
    for node in nodes:
        GPU.objects.filter(node=node).update(utilization_pct=12.0)
    changes = read_changes(mark, ())
    assert changes.node_pks == {node.pk for node in nodes}
    assert changes.newest == newest() > mark
    assert read_changes(changes.newest, changes.pending).node_pks == set()


def test_trimming_keeps_the_newest_row_and_a_trimmed_log_means_a_full_rebuild(cluster):
    cache = SnapshotCache()
    cache.refresh()
    node = Node.objects.order_by("name").first()
    Node.objects.filter(pk=node.pk).update(cordoned=True)
    Node.objects.filter(pk=node.pk).update(cordoned=False)
    from django.utils import timezone

    assert trim_changes(timezone.now() + 2 * services.snapshots.RETENTION) > 0
    assert SnapshotChange.objects.count() == 1
    Node.objects.filter(pk=node.pk).update(labels={"fresh": "yes"})

    assert_same(cache.refresh(), build_snapshot())
    assert cache.rebuilds == 2  # rows it never read were trimmed: rebuilt whole


# ---- the property ------------------------------------------------------------------------------


def _random_change(rng: random.Random, cluster, cache: SnapshotCache, step: int) -> str:
    nodes = list(Node.objects.order_by("name"))
    node = rng.choice(nodes)
    kind = rng.choice(["deploy", "deploy", "deploy", "delete", "cordon", "labels", "telemetry", "pod",
                       "decision", "decision", "add", "remove"])
    if kind == "deploy":
        try:
            sharing = rng.choice(SHARINGS)
            gpus = rng.choice([1, 1, 2]) if sharing in ("auto", "exclusive") else 1
            services.deploy(spec(name=f"d{step}", sharing=sharing, memory_gb=rng.choice([2, 8, 20, 40]),
                                 gpu_count=gpus), cluster=cluster)
        except NoCapacity:
            pass
    elif kind == "delete":
        live = list(Deployment.objects.exclude(status="deleted"))
        if live:
            services.delete_deployment(rng.choice(live), cluster=cluster)
    elif kind == "cordon":
        Node.objects.filter(pk=node.pk).update(cordoned=not node.cordoned)
    elif kind == "labels":
        Node.objects.filter(pk=node.pk).update(labels={**node.labels, "zone": rng.choice("abc")})
    elif kind == "telemetry":
        GPU.objects.filter(node=node).update(utilization_pct=rng.choice([None, 5.0, 95.0]),
                                             memory_used_mib=rng.randrange(0, 1000), power_w=rng.random() * 400)
    elif kind == "pod":
        free = Partition.objects.filter(gpu__node=node, pod="", hold__isnull=True).first()
        if free is not None:
            Partition.objects.filter(pk=free.pk).update(pod=f"ml/pod-{step}")
    elif kind == "decision":  # decided on the cache's own snapshot, never reserved: rolled back
        with cache.lease() as inventory:
            request = PlacementRequest(key=f"ghost/{step}", memory_mib=rng.choice([4096, 40960]),
                                       sharing=SharingRequest(rng.choice(SHARINGS)))
            placement_scheduler().schedule(request, inventory.snapshot)
    elif kind == "add":
        make_node(f"zz-added-{step}", gpu_count=rng.choice([1, 4]))
    elif kind == "remove":
        spare = [n for n in nodes if n.name.startswith("zz-added-") and not n.placements.exists()]
        if spare:
            rng.choice(spare).delete()
    return kind


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_after_random_changes_the_cached_snapshot_equals_a_rebuild(cluster, seed):
    rng = random.Random(seed)
    cache = SnapshotCache()
    assert_same(cache.refresh(), build_snapshot())
    kinds = []
    for step in range(40):
        kinds.append(_random_change(rng, cluster, cache, step))
        assert_same(cache.refresh(), build_snapshot())
    structural = sum(1 for kind in kinds if kind in ("add", "remove"))
    assert cache.updates >= len(kinds) - structural - kinds.count("decision") - 5  # node by node, mostly
    assert cache.rebuilds <= 1 + structural


def test_a_rolled_back_reservation_leaves_no_trace_in_the_cache(cluster, monkeypatch):
    cache = SnapshotCache()
    cache.refresh()
    # The reservation is written, then its transaction rolls back (a cluster refusal before commit).
    monkeypatch.setattr(placing, "check_quota", lambda namespace: (_ for _ in ()).throw(RuntimeError("boom")))
    monkeypatch.setattr(placing, "namespace_quota", lambda namespace: object())
    monkeypatch.setattr(placing, "decide", lambda spec, inventory, scheduler, **options: _decide_on(cache, spec))
    with pytest.raises(RuntimeError):
        services.deploy(spec(name="ghost", sharing="exclusive", memory_gb=40), cluster=cluster)
    assert Deployment.objects.count() == 0
    assert_same(cache.refresh(), build_snapshot())


def _decide_on(cache: SnapshotCache, request_spec):
    from scheduler.services.deciding import decide

    with cache.lease() as inventory:
        return decide(request_spec, inventory, placement_scheduler())


def test_without_its_triggers_the_cache_keeps_nothing_and_post_migrate_puts_them_back(cluster):
    from django.apps import apps

    from scheduler.apps import _after_migrate

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute('DROP TRIGGER gpuplane_snapshot_gpu_update ON "nodes_gpu"')
        else:  # what rebuilding the table for a migration does on SQLite
            cursor.execute("DROP TRIGGER gpuplane_snapshot_gpu_update")
    assert not snapshot_triggers.installed(connection)
    cache = SnapshotCache()
    assert_same(cache.refresh(), build_snapshot())
    assert cache.inventory is None  # built for one decision, not kept: nothing would tell it it went stale

    _after_migrate(apps.get_app_config("scheduler"), using="default")

    assert snapshot_triggers.installed(connection)
    mark = newest()
    node = Node.objects.order_by("name").first()
    GPU.objects.filter(node=node).update(utilization_pct=42.0)
    assert logged_nodes(mark) == {node.pk}
