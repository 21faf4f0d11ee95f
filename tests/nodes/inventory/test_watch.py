"""Inventory sync by list-and-watch, on the simulated cluster (which keeps resourceVersions and a
bounded watch history as an API server does).

The first sync lists; later ones watch from the versions the rows were synced at and touch only
the nodes that changed. Nothing changed: no INSERT, UPDATE or DELETE, no audit event. A version
too old (410 Gone), or rows synced at other versions than this process's mirror, means a relist.
"""
from __future__ import annotations

import pytest
from django.db import connection
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
    assert len(queries) == 1  # the stored versions: no inventory row is even read
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


def test_rows_synced_at_other_versions_than_the_mirror_are_relisted_in_full(cluster):
    sync_inventory(cluster)
    Node.objects.filter(name="n3").update(cordoned=True)  # a drift the cluster knows nothing of
    InventoryWatch.objects.all().delete()  # e.g. the rows were restored from before any sync

    report = sync_inventory(cluster)

    assert report.mode == "relist" and report.heartbeats == 3 and report.updated["nodes"] == 1
    assert Node.objects.get(name="n3").cordoned is False
