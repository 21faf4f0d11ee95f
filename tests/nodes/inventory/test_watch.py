"""Inventory sync by list-and-watch, on the simulated cluster (which keeps resourceVersions and a
bounded watch history as an API server does).

The first sync lists; later ones watch from the versions the rows were synced at and touch only
the nodes that changed. Nothing changed: no INSERT, UPDATE or DELETE, no audit event. A version
too old (410 Gone), or rows rolled back to before this process's mirror, means a relist; rows that
another process synced since are caught up with by watching from the mirror.
"""
from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from lifecycle.models import AuditEvent
from nodes.cluster.base import ResourceVersionGone
from nodes.cluster.sim import SimulatedCluster, store
from nodes.inventory import watching
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, InventoryWatch, Node, Partition
from tests.nodes.inventory.helpers import snapshot, writes

H100 = "NVIDIA-H100-80GB-HBM3"
H100_MIB = 81559

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(tmp_path) -> SimulatedCluster:
    cluster = SimulatedCluster(tmp_path / "cluster.json", pod_ready_delay_s=0, mig_reconfigure_s=0, plugin_restart_s=0)
    cluster.add_gpu_nodes([
        {"name": f"n{i}", "product": H100, "gpu_count": 2, "gpu_memory_mib": H100_MIB} for i in range(4)
    ])
    watching.forget_mirrors()
    return cluster


def test_a_sync_of_an_unchanged_cluster_writes_nothing_and_records_no_event(cluster):
    first = sync_inventory(cluster)
    assert first.mode == "relist" and first.created["nodes"] == 4
    before, events = snapshot(), AuditEvent.objects.count()

    with CaptureQueriesContext(connection) as queries:
        report = sync_inventory(cluster)

    assert report.mode == "watch" and report.events == 0 and not report.changed
    assert writes(queries) == []
    # The stored versions and the agent reports not applied yet: no inventory row is even read.
    assert len(queries) == 2
    assert snapshot() == before and AuditEvent.objects.count() == events


def test_a_changed_node_is_synced_alone_with_its_audit_event(cluster):
    sync_inventory(cluster)
    cluster.cordon("n2")

    report = sync_inventory(cluster)

    assert report.mode == "watch" and report.events >= 1
    assert report.updated["nodes"] == 1 and report.heartbeats == 0  # the other three were not read
    assert Node.objects.get(name="n2").cordoned is True
    assert AuditEvent.objects.filter(verb="node.updated", object_repr="n2").count() == 1
    assert sync_inventory(cluster).events == 0  # and the next sync is quiet again


def test_pods_that_come_and_go_are_bound_and_released_by_the_watch(cluster):
    sync_inventory(cluster)
    cluster.run_pod("team", "train", "n1", resources={"nvidia.com/gpu": 1}, gpus=[1])

    sync_inventory(cluster)
    assert GPU.objects.get(node__name="n1", index=1).allocated_milli == 1000
    assert Partition.objects.get(gpu__node__name="n1", gpu__index=1).pod == "team/train"

    cluster.delete_pod("team", "train")
    sync_inventory(cluster)
    assert GPU.objects.get(node__name="n1", index=1).allocated_milli == 0
    assert Partition.objects.filter(pod="team/train").count() == 0


def test_a_node_and_its_pod_added_to_the_cluster_come_through_the_watch_as_added_and_show_up(cluster):
    sync_inventory(cluster)
    synced = InventoryWatch.objects.get()
    cluster.add_gpu_node("n9", product=H100, gpu_count=2, gpu_memory_mib=H100_MIB)
    cluster.run_pod("team", "train", "n9", resources={"nvidia.com/gpu": 1}, gpus=[0])
    # What the sync is about to read: the API's event types for objects it never saw.
    assert [(e.type, e.key) for e in cluster.watch_nodes(synced.nodes_version, 0).events] == [("ADDED", "n9")]
    pod_events = {e.key: e.type for e in cluster.watch_gpu_pods(synced.pods_version, 0).events}
    assert pod_events["team/train"] == "ADDED" and set(pod_events.values()) == {"ADDED"}  # and n9's plugin pod

    report = sync_inventory(cluster)

    assert report.mode == "watch" and report.created["nodes"] == 1 and report.heartbeats == 0
    assert sorted(GPU.objects.filter(node__name="n9").values_list("index", flat=True)) == [0, 1]
    assert GPU.objects.get(node__name="n9", index=0).allocated_milli == 1000
    assert Partition.objects.get(gpu__node__name="n9", gpu__index=0).pod == "team/train"
    assert AuditEvent.objects.filter(verb="node.created", object_repr="n9").count() == 1
    watched = snapshot()
    sync_inventory(cluster, relist=True)
    assert snapshot() == watched  # what a full relist writes


def test_added_and_deleted_nodes_come_through_the_watch_as_a_relist_would_write_them(cluster):
    sync_inventory(cluster)
    cluster.add_gpu_node("n9", product=H100, gpu_count=4, gpu_memory_mib=H100_MIB)

    added = sync_inventory(cluster)

    assert added.mode == "watch" and added.created == {"nodes": 1, "gpus": 4, "partitions": 4}
    # A reset keeps versions counting up; the sync was at the version it started from, so its
    # deletions are all in the history.
    cluster.reset()
    cluster.add_gpu_node("m1", product=H100, gpu_count=1, gpu_memory_mib=H100_MIB)
    after_reset = sync_inventory(cluster)
    assert after_reset.mode == "watch" and after_reset.deleted["nodes"] == 5
    assert set(Node.objects.values_list("name", flat=True)) == {"m1"}
    watched = snapshot()
    sync_inventory(cluster, relist=True)
    assert snapshot() == watched  # what a full relist writes


def test_a_version_older_than_the_watch_history_answers_gone_and_the_sync_relists(cluster, monkeypatch):
    sync_inventory(cluster)
    monkeypatch.setattr(store, "TOMBSTONE_VERSIONS", 1)  # the store forgets older writes' deletions
    for name in ("n0", "n1", "n2"):
        cluster.cordon(name)
    with pytest.raises(ResourceVersionGone):
        cluster.watch_nodes(InventoryWatch.objects.get().nodes_version, 0)

    report = sync_inventory(cluster)

    assert report.mode == "relist"
    assert report.updated["nodes"] == 3 and report.heartbeats == 0  # only what differs from the mirror
    assert set(Node.objects.filter(cordoned=True).values_list("name", flat=True)) == {"n0", "n1", "n2"}


def test_rows_synced_at_no_recorded_versions_are_relisted_in_full(cluster):
    sync_inventory(cluster)
    Node.objects.filter(name="n3").update(cordoned=True)  # a drift the cluster knows nothing of
    InventoryWatch.objects.all().delete()  # e.g. the rows were restored from before any sync

    report = sync_inventory(cluster)

    assert report.mode == "relist" and report.heartbeats == 3 and report.updated["nodes"] == 1
    assert Node.objects.get(name="n3").cordoned is False


class Process:
    """One worker process's mirror: syncing as it swaps the module's mirrors for its own."""

    def __init__(self, monkeypatch) -> None:
        self.monkeypatch = monkeypatch
        self.mirrors: dict[str, watching.ClusterMirror] = {}

    def sync(self, cluster: SimulatedCluster):
        self.monkeypatch.setattr(watching, "_mirrors", self.mirrors)
        return sync_inventory(cluster)


@pytest.fixture
def processes(monkeypatch) -> tuple[Process, Process]:
    return Process(monkeypatch), Process(monkeypatch)


def test_two_processes_syncing_in_turn_an_unchanged_cluster_never_relist_nor_write(cluster, processes):
    a, b = processes
    assert a.sync(cluster).mode == "relist" and b.sync(cluster).mode == "relist"  # no mirror yet
    before, events = snapshot(), AuditEvent.objects.count()

    for process in (a, b, a, b):
        with CaptureQueriesContext(connection) as queries:
            report = process.sync(cluster)
        assert report.mode == "watch" and not report.changed
        # The stored versions and the agent reports not applied yet.
        assert writes(queries) == [] and len(queries) == 2

    assert snapshot() == before and AuditEvent.objects.count() == events


def test_a_change_synced_by_one_process_is_caught_up_with_not_rewritten_by_the_other(cluster, processes):
    a, b = processes
    a.sync(cluster)
    b.sync(cluster)
    cluster.cordon("n2")
    assert a.sync(cluster).updated["nodes"] == 1
    cluster.cordon("n3")  # after A's sync: B alone must write it
    events = AuditEvent.objects.count()
    n2_written_at = Node.objects.get(name="n2").last_seen

    report = b.sync(cluster)

    assert report.mode == "catch-up" and report.events == 2
    assert report.updated["nodes"] == 1 and report.heartbeats == 1  # n2 compared, found right; n0, n1 not read
    assert [event.object_repr for event in AuditEvent.objects.order_by("pk")[events:]] == ["n3"]
    assert Node.objects.get(name="n2").last_seen == n2_written_at  # not written again
    assert set(Node.objects.filter(cordoned=True).values_list("name", flat=True)) == {"n2", "n3"}
    # A, now behind B, catches up too: n3 is right already, nothing is written.
    with CaptureQueriesContext(connection) as queries:
        caught_up = a.sync(cluster)
    assert caught_up.mode == "catch-up" and not caught_up.changed and writes(queries) == []
    assert a.sync(cluster).mode == "watch" and b.sync(cluster).mode == "watch"


def test_a_process_behind_with_nothing_changed_since_catches_up_without_a_write(cluster, processes):
    a, b = processes
    a.sync(cluster)
    b.sync(cluster)
    cluster.cordon("n1")
    a.sync(cluster)

    with CaptureQueriesContext(connection) as queries:
        report = b.sync(cluster)  # n1's event: compared, right already

    assert report.mode == "catch-up" and not report.changed and writes(queries) == []
    assert b.mirrors[cluster.cluster_key].versions == a.mirrors[cluster.cluster_key].versions


def test_rows_rolled_back_to_before_the_mirror_are_relisted_in_full(cluster, processes):
    a, _ = processes
    a.sync(cluster)
    backup = InventoryWatch.objects.values("nodes_version", "pods_version", "generation").get()
    cluster.cordon("n1")
    a.sync(cluster)
    # The database restored from the backup: n1 uncordoned, at the versions (and generation) of then.
    Node.objects.filter(name="n1").update(cordoned=False)
    InventoryWatch.objects.update(**backup)

    report = a.sync(cluster)

    # A watch from the mirror's versions would see nothing: n1 changed before them.
    assert report.mode == "relist" and report.updated["nodes"] == 1 and report.heartbeats == 3
    assert Node.objects.get(name="n1").cordoned is True
    assert InventoryWatch.objects.get().generation == backup["generation"] + 1


def test_two_syncs_that_overlap_drop_the_recorded_versions_so_the_next_syncs_relist(cluster, processes, monkeypatch):
    a, b = processes
    a.sync(cluster)
    b.sync(cluster)
    cluster.cordon("n0")
    monkeypatch.setattr(watching, "_mirrors", a.mirrors)
    reading = watching.read_cluster(cluster)  # A has read the cluster, not written yet ...
    cluster.cordon("n1")
    b.sync(cluster)  # ... when B syncs both changes

    monkeypatch.setattr(watching, "_mirrors", a.mirrors)
    with transaction.atomic():
        watching.remember(reading)  # A's rows would be as of before n1's change

    assert not InventoryWatch.objects.exists() and a.mirrors == {}
    assert b.sync(cluster).mode == "relist" and a.sync(cluster).mode == "relist"
