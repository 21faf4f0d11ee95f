"""Inventory sync, lifecycle: nodes and GPUs that come, change and go, and partitions placements hold.

Most tests drive the sync with FakeCluster (tests/nodes/inventory/helpers.py), a backend that just
returns the value objects it was given, so each rule is tested without the simulator in the way.
The arithmetic of the expected shares and memory is written next to each assertion.
"""
from __future__ import annotations

import pytest

from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, Node
from tests.nodes.inventory.helpers import (
    A100,
    A100_MIB,
    FakeCluster,
    gpu,
    gpu_node,
    holder_id,
    is_free,
    partitions_of,
    placement_on,
    pod,
    sharing_labels,
)


@pytest.mark.django_db
def test_it_deletes_nodes_gone_from_the_cluster_unless_gpuplane_placed_onto_them():
    cluster = FakeCluster([gpu_node("keep"), gpu_node("drop"), gpu_node("held")])
    sync_inventory(cluster)
    placement = placement_on(partitions_of("held", 0)[0])

    cluster.nodes = [gpu_node("keep")]
    report = sync_inventory(cluster)

    assert set(Node.objects.values_list("name", flat=True)) == {"keep", "held"}
    held = Node.objects.get(name="held")
    assert held.ready is False
    assert report.gone_nodes_kept == ["held"]
    assert report.deleted["nodes"] == 1
    # The held partition survives untouched; the free one on the vanished GPU 0 cannot be used.
    assert [holder_id(p) for p in partitions_of("held", 0)] == [placement.pk]
    assert not GPU.objects.filter(node=held, index=1).exists()

    cluster.nodes = [gpu_node("keep"), gpu_node("held")]
    sync_inventory(cluster)
    assert Node.objects.get(name="held").ready is True
    assert [holder_id(p) for p in partitions_of("held", 0)] == [placement.pk]
    assert is_free(partitions_of("held", 1)[0])


@pytest.mark.django_db
def test_it_never_touches_or_deletes_a_partition_held_by_a_placement():
    cluster = FakeCluster([gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=1, labels=sharing_labels("mps", 2, "mps-2"))])
    sync_inventory(cluster)
    held_partition = partitions_of("a1", 0)[1]
    placement = placement_on(held_partition)
    # The placement's own pod: found on the cluster, but its partition is already held.
    gpuplane_pod = pod(
        "serving/llama-0-7d9f",
        "a1",
        labels={"app.kubernetes.io/managed-by": "gpuplane", "app.kubernetes.io/name": "llama-0"},
    )
    cluster.pods = [gpuplane_pod, pod("other/x", "a1")]

    cluster.nodes = [gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=1)]  # back to exclusive
    report = sync_inventory(cluster)

    rows = partitions_of("a1", 0)
    kept = next(p for p in rows if p.pk == held_partition.pk)
    assert (kept.kind, kept.slot, kept.share_milli, holder_id(kept), kept.pod) == ("mps", 1, 500, placement.pk, "")
    [exclusive] = [p for p in rows if p.pk != held_partition.pk]
    assert (exclusive.kind, exclusive.slot, exclusive.pod) == ("exclusive", 0, "other/x")
    assert report.unplaced_pods == []  # the gpuplane pod is its placement's, not an extra occupant
    # Both count, capped at the GPU: 1000 + 500 -> 1000; 40960 + 20480 -> 40960.
    assert (gpu("a1", 0).allocated_milli, gpu("a1", 0).allocated_memory_mib) == (1000, A100_MIB)


@pytest.mark.django_db
def test_gpus_gone_from_a_node_are_deleted_unless_a_placement_holds_one_of_their_partitions():
    cluster = FakeCluster([gpu_node("h1", gpu_count=4)])
    sync_inventory(cluster)
    placement = placement_on(partitions_of("h1", 3)[0])

    cluster.nodes = [gpu_node("h1", gpu_count=2)]
    report = sync_inventory(cluster)

    assert sorted(GPU.objects.filter(node__name="h1").values_list("index", flat=True)) == [0, 1, 3]
    assert [holder_id(p) for p in partitions_of("h1", 3)] == [placement.pk]
    assert report.deleted == {"nodes": 0, "gpus": 1, "partitions": 1}


@pytest.mark.django_db
def test_a_gpu_whose_uuid_changes_at_the_same_index_keeps_its_row():
    cluster = FakeCluster([gpu_node("h1", uuid_prefix="GPU-derived")])
    sync_inventory(cluster)
    ids = list(GPU.objects.order_by("index").values_list("pk", flat=True))

    cluster.nodes = [gpu_node("h1", uuid_prefix="GPU-agent")]
    report = sync_inventory(cluster)

    assert list(GPU.objects.order_by("index").values_list("pk", "uuid")) == [
        (ids[0], "GPU-agent-h1-0"),
        (ids[1], "GPU-agent-h1-1"),
    ]
    assert report.deleted == {"nodes": 0, "gpus": 0, "partitions": 0}


@pytest.mark.django_db
def test_changing_a_nodes_sharing_mode_replaces_its_free_partitions():
    cluster = FakeCluster([gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=2)])
    sync_inventory(cluster)
    cluster.nodes = [gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=2, labels=sharing_labels("mps", 2, "mps-2"))]

    report = sync_inventory(cluster)

    assert [(p.kind, p.slot, p.share_milli) for p in partitions_of("a1", 0)] == [("mps", 0, 500), ("mps", 1, 500)]
    assert report.deleted["partitions"] == 2 and report.created["partitions"] == 4
    assert Node.objects.get(name="a1").sharing_mode == "mps"


@pytest.mark.django_db
def test_node_fields_follow_the_cluster():
    cluster = FakeCluster([gpu_node("h1")])
    sync_inventory(cluster)
    cluster.nodes = [gpu_node("h1", ready=False, unschedulable=True, labels={"zone": "b"})]

    report = sync_inventory(cluster)

    row = Node.objects.get(name="h1")
    assert (row.ready, row.cordoned, row.labels["zone"]) == (False, True, "b")
    assert report.updated["nodes"] == 1
