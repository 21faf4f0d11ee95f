"""Inventory sync, pods: which partition each pod found on the cluster uses.

Most tests drive the sync with FakeCluster (tests/nodes/inventory/helpers.py), a backend that just
returns the value objects it was given, so each rule is tested without the simulator in the way.
The arithmetic of the expected shares and memory is written next to each assertion.
"""
from __future__ import annotations

import pytest

from nodes.inventory.sync import sync_inventory
from tests.nodes.inventory.helpers import (
    A100,
    A100_MIB,
    H100_MIB,
    WEIGHTED_LABELS,
    FakeCluster,
    gpu,
    gpu_node,
    is_free,
    partitions_of,
    pod,
    sharing_labels,
)


@pytest.mark.django_db
def test_pods_occupy_the_gpus_their_annotation_names_else_the_lowest_free_ones():
    cluster = FakeCluster(
        [gpu_node("h1", gpu_count=4)],
        [
            # "pair" sorts first but may go anywhere; "pinned" must have GPU 0.
            pod("train/pinned", "h1", {"nvidia.com/gpu": 1}, gpus="0"),
            pod("train/pair", "h1", {"nvidia.com/gpu": 2}),
            pod("train/done", "h1", phase="Succeeded"),  # released its GPU
            pod("train/unbound", "", phase="Pending"),  # not on a node yet
        ],
    )
    report = sync_inventory(cluster)

    assert [partitions_of("h1", i)[0].pod for i in range(4)] == ["train/pinned", "train/pair", "train/pair", ""]
    assert [gpu("h1", i).allocated_milli for i in range(4)] == [1000, 1000, 1000, 0]
    assert [gpu("h1", i).allocated_memory_mib for i in range(4)] == [H100_MIB, H100_MIB, H100_MIB, 0]
    assert report.unplaced_pods == []


@pytest.mark.django_db
def test_mig_pods_occupy_the_instance_at_their_start_else_the_lowest_free_one_of_their_profile():
    node = gpu_node(
        "m1",
        gpu_count=2,
        mig={
            0: [("2g.20gb", 0, 2), ("2g.20gb", 2, 2), ("2g.20gb", 4, 2), ("1g.10gb", 6, 1)],
            1: [("2g.20gb", 0, 2)],
        },
    )
    cluster = FakeCluster(
        [node],
        [
            # "any-a" sorts first but may go anywhere; "pinned-0" must have the instance at start 0.
            pod("s/pinned-0", "m1", {"nvidia.com/mig-2g.20gb": 1}, gpus="0", mig_start=0),
            pod("s/any-a", "m1", {"nvidia.com/mig-2g.20gb": 1}),
            pod("s/on-gpu1", "m1", {"nvidia.com/mig-2g.20gb": 1}, gpus="1"),
            pod("s/small", "m1", {"nvidia.com/mig-1g.10gb": 1}),
            pod("s/no-such", "m1", {"nvidia.com/mig-7g.80gb": 1}),
        ],
    )
    report = sync_inventory(cluster)

    assert [(p.mig_start, p.pod) for p in partitions_of("m1", 0)] == [
        (0, "s/pinned-0"),
        (2, "s/any-a"),
        (4, ""),
        (6, "s/small"),
    ]
    assert [p.pod for p in partitions_of("m1", 1)] == ["s/on-gpu1"]
    assert report.unplaced_pods == ["s/no-such"]
    # 285 + 285 + 142 milli (2g, 2g, 1g: slices * 1000 // 7); 20096 + 20096 + 9984 MiB (NVML's instances)
    assert (gpu("m1", 0).allocated_milli, gpu("m1", 0).allocated_memory_mib) == (712, 50176)


@pytest.mark.django_db
def test_time_sliced_pods_account_the_memory_they_declare_else_a_rth_of_the_gpu():
    cluster = FakeCluster(
        [gpu_node("t1", gpu_count=1, labels=sharing_labels("time-slicing", 4, "ts-4"))],
        [pod("dev/a", "t1", memory_mib=16384), pod("dev/b", "t1")],
    )
    sync_inventory(cluster)

    assert [p.pod for p in partitions_of("t1", 0)] == ["dev/a", "dev/b", "", ""]
    # 250 + 250 milli; 16384 + 81559 // 4 = 16384 + 20389 MiB
    assert (gpu("t1", 0).allocated_milli, gpu("t1", 0).allocated_memory_mib) == (500, 36773)


@pytest.mark.django_db
def test_pods_that_find_no_partition_are_reported_not_raised():
    cluster = FakeCluster(
        [gpu_node("h1", gpu_count=1)],
        [pod("a/first", "h1"), pod("b/second", "h1"), pod("c/elsewhere", "unknown-node")],
    )
    report = sync_inventory(cluster)

    assert partitions_of("h1", 0)[0].pod == "a/first"
    assert report.unplaced_pods == ["b/second", "c/elsewhere"]


@pytest.mark.django_db
def test_partitions_of_pods_that_are_gone_are_freed_and_pods_keep_their_partition_when_others_leave():
    node = gpu_node("m2", product=A100, memory_mib=A100_MIB, gpu_count=1, labels=sharing_labels("mps", 4, "mps-4"))
    cluster = FakeCluster([node], [pod("s/a", "m2"), pod("s/b", "m2"), pod("s/c", "m2")])
    sync_inventory(cluster)
    assert [p.pod for p in partitions_of("m2", 0)] == ["s/a", "s/b", "s/c", ""]

    cluster.pods = [pod("s/c", "m2")]
    report = sync_inventory(cluster)

    # s/c stays in slot 2 rather than moving down to the lowest free slot.
    assert [p.pod for p in partitions_of("m2", 0)] == ["", "", "s/c", ""]
    assert (gpu("m2", 0).allocated_milli, gpu("m2", 0).allocated_memory_mib) == (250, 10240)
    assert report.updated == {"nodes": 0, "gpus": 1, "partitions": 2}

    cluster.pods = []
    sync_inventory(cluster)
    assert all(is_free(p) for p in partitions_of("m2", 0))
    assert gpu("m2", 0).allocated_milli == 0


@pytest.mark.django_db
def test_a_weighted_share_whose_pod_is_gone_is_deleted():
    cluster = FakeCluster(
        [gpu_node("w1", product=A100, memory_mib=A100_MIB, labels=WEIGHTED_LABELS)],
        [pod("s/a", "w1", gpus="1", share_milli=300), pod("s/b", "w1", gpus="1", share_milli=200)],
    )
    sync_inventory(cluster)
    cluster.pods = cluster.pods[1:]
    report = sync_inventory(cluster)

    assert [(p.pod, p.share_milli) for p in partitions_of("w1", 1)] == [("s/b", 200)]
    assert gpu("w1", 1).allocated_milli == 200
    assert report.deleted["partitions"] == 1
