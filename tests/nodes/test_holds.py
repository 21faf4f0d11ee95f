"""nodes.holds: the inventory asks a registered PartitionHolder who holds a partition.

These tests replace the scheduler's holder with FakeHolder (tests/nodes/fake_holder.py: held
partition ids kept in memory), so they exercise the nodes app alone: sync, the API, the pages and the simulated collector all
learn what is held through the hook, never from the scheduler's models.
"""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from nodes.collectors.simulated import SimulatedCollector
from nodes.demo import DemoClusterError, load_demo_cluster
from nodes.holds import (
    NoHolder,
    PartitionHolder,
    free_partition_filter,
    occupied_partition_filter,
    partition_holder,
    register_holder,
    with_holder_id,
)
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, Node, Partition
from tests.nodes.fake_holder import HOLDER_ID, FakeHolder
from tests.nodes.inventory.helpers import (
    A100,
    A100_MIB,
    FakeCluster,
    gpu,
    gpu_node,
    no_writes,
    partitions_of,
    pod,
    sharing_labels,
    snapshot,
    writes,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(viewer) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def mps_cluster() -> FakeCluster:
    """One A100 with 2 MPS slots of 500 milli, 20480 MiB each."""
    return FakeCluster([gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=1, labels=sharing_labels("mps", 2, "mps-2"))])


# --- the default holder ------------------------------------------------------------------------


def test_the_scheduler_registers_its_holder_when_the_apps_are_ready():
    assert type(partition_holder()).__name__ == "PlacementHolder"


def test_the_default_holder_holds_nothing(no_holder):
    sync_inventory(FakeCluster([gpu_node("h1")], [pod("ml/train-0", "h1", gpus="0")]))
    holder: PartitionHolder = partition_holder()

    assert isinstance(holder, NoHolder)
    assert holder.holds() == []
    assert holder.nodes_in_use(Node.objects.values_list("pk", flat=True)) == set()
    assert holder.describe(Partition.objects.values_list("pk", flat=True)) == {}
    assert holder.count_holders() == 0
    assert list(with_holder_id(Partition.objects.order_by("pk")).values_list("holder_id", flat=True)) == [None, None]
    # Only the pod's partition is occupied; the free filter and its complement split the rows.
    assert [p.pod for p in Partition.objects.filter(occupied_partition_filter())] == ["ml/train-0"]
    assert [p.gpu.index for p in Partition.objects.filter(free_partition_filter())] == [1]


def test_register_holder_returns_the_previous_one_to_put_back(no_holder):
    fake = FakeHolder()
    assert register_holder(fake) is None
    assert partition_holder() is fake
    assert register_holder(None) is fake
    assert isinstance(partition_holder(), NoHolder)


# --- inventory sync through the hook -------------------------------------------------------------


def test_sync_leaves_a_held_partition_alone_when_the_node_changes_mode(holder):
    cluster = mps_cluster()
    sync_inventory(cluster)
    held = partitions_of("a1", 0)[1]
    holder.hold(held)
    holders_pod = pod(
        "serving/llama-0-7d9f", "a1", labels={"app.kubernetes.io/managed-by": "gpuplane", "app.kubernetes.io/name": "llama-0"}
    )
    cluster.pods = [holders_pod, pod("other/x", "a1")]
    cluster.nodes = [gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=1)]  # back to exclusive

    report = sync_inventory(cluster)

    rows = partitions_of("a1", 0)
    kept = next(p for p in rows if p.pk == held.pk)
    assert (kept.kind, kept.slot, kept.share_milli, kept.pod) == ("mps", 1, 500, "")
    [exclusive] = [p for p in rows if p.pk != held.pk]
    assert (exclusive.kind, exclusive.slot, exclusive.pod) == ("exclusive", 0, "other/x")
    assert report.unplaced_pods == []  # the holder's own pod is not an extra occupant
    # Both count, capped at the GPU: 1000 + 500 -> 1000; 40960 + 20480 -> 40960.
    assert (gpu("a1", 0).allocated_milli, gpu("a1", 0).allocated_memory_mib) == (1000, A100_MIB)


def test_sync_keeps_a_gone_node_and_gpu_while_the_holder_refers_to_them(holder):
    cluster = FakeCluster([gpu_node("keep"), gpu_node("held", gpu_count=2)])
    sync_inventory(cluster)
    holder.hold(partitions_of("held", 1)[0])

    cluster.nodes = [gpu_node("keep")]
    report = sync_inventory(cluster)

    assert report.gone_nodes_kept == ["held"]
    assert Node.objects.get(name="held").ready is False
    # The held partition's GPU stays; the other GPU of the vanished node goes, with its partition.
    assert list(GPU.objects.filter(node__name="held").values_list("index", flat=True)) == [1]
    assert [p.pk for p in partitions_of("held", 1)] == sorted(holder.partition_ids)
    assert report.deleted == {"nodes": 0, "gpus": 1, "partitions": 1}


def test_sync_charges_a_held_time_slice_replica_the_memory_the_holder_says(holder):
    cluster = FakeCluster([gpu_node("t1", gpu_count=1, labels=sharing_labels("time-slicing", 4, "ts-4"))])
    sync_inventory(cluster)
    holder.hold(partitions_of("t1", 0)[0])
    holder.memory_mib_per_gpu = 12000

    sync_inventory(cluster)

    # 250 milli of one replica; its memory is the holder's 12000 MiB, not the replica's 81559.
    assert (gpu("t1", 0).allocated_milli, gpu("t1", 0).allocated_memory_mib) == (250, 12000)


def test_a_second_sync_with_held_partitions_writes_nothing(holder):
    cluster = mps_cluster()
    sync_inventory(cluster)
    holder.hold(partitions_of("a1", 0)[0])
    sync_inventory(cluster)  # takes the hold into the GPU's totals
    before = snapshot()

    with CaptureQueriesContext(connection) as queries:
        report = sync_inventory(cluster)

    assert no_writes(writes(queries))
    assert snapshot() == before and not report.changed


# --- readers through the hook --------------------------------------------------------------------


def test_the_partition_api_shows_the_holder_and_filters_on_it(holder, viewer_api):
    sync_inventory(mps_cluster())
    held, free = partitions_of("a1", 0)
    holder.hold(held)

    rows = {row["id"]: row for row in viewer_api.get("/api/v1/partitions/").json()["results"]}
    free_rows = viewer_api.get("/api/v1/partitions/?free=true").json()["results"]

    assert (rows[held.pk]["free"], rows[held.pk]["placement"]) == (False, HOLDER_ID)
    assert (rows[free.pk]["free"], rows[free.pk]["placement"]) == (True, None)
    assert [row["id"] for row in free_rows] == [free.pk]


def test_the_node_page_names_the_holder(holder, viewer_client):
    sync_inventory(mps_cluster())
    holder.hold(partitions_of("a1", 0)[1])

    body = viewer_client.get("/nodes/a1/").content.decode()

    assert "serving/llama #0" in body


def test_the_simulated_collector_loads_a_gpu_by_what_its_holder_runs(holder):
    sync_inventory(FakeCluster([gpu_node("h1", gpu_count=2)]))
    holder.hold(partitions_of("h1", 0)[0])

    readings = {r.index: r for r in SimulatedCollector(seed=1).collect()}

    # A whole GPU held for training: load 0.82-0.97 drifting by at most 12 %, jitter 2 points:
    # at least 82 * 0.88 - 2 = 70.2 %. The other GPU idles at 0-3 %.
    assert readings[0].utilization_pct >= 70
    assert readings[1].utilization_pct <= 3


def test_the_demo_reset_asks_the_holder_before_deleting_the_inventory(holder):
    sync_inventory(FakeCluster([gpu_node("h1")]))
    with pytest.raises(DemoClusterError, match="1 placement"):
        load_demo_cluster(reset=True)
    assert list(Node.objects.values_list("name", flat=True)) == ["h1"]

    load_demo_cluster(reset=True, force=True)

    assert holder.forgotten
    assert not Node.objects.filter(name="h1").exists()


def test_the_admin_shows_who_holds_a_partition_read_only(holder):
    sync_inventory(mps_cluster())
    held, free = partitions_of("a1", 0)
    holder.hold(held)
    superuser = Client()
    superuser.force_login(User.objects.create_superuser("root", password="not-used"))

    listing = superuser.get("/admin/nodes/partition/").content.decode()
    change = superuser.get(f"/admin/nodes/partition/{held.pk}/change/").content.decode()

    assert f'<a href="/deployments/{HOLDER_ID}/">serving/llama #0</a>' in listing
    assert "serving/llama #0" in change
    assert 'name="placement"' not in change  # holds are written by their holder, never here
