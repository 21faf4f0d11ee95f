"""Inventory sync, rows per sharing mode: the Node, GPU and Partition rows each mode gives.

Most tests drive the sync with FakeCluster (tests/nodes/inventory/helpers.py), a backend that just
returns the value objects it was given, so each rule is tested without the simulator in the way.
The arithmetic of the expected shares and memory is written next to each assertion.
"""
from __future__ import annotations

import logging

import pytest

from nodes.inventory.sync import sync_inventory
from nodes.models import Node
from nodes.vocabulary import Taint
from tests.nodes.inventory.helpers import (
    A100,
    A100_MIB,
    H100,
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
def test_it_creates_an_exclusive_node_with_one_whole_gpu_partition_per_gpu():
    report = sync_inventory(FakeCluster([gpu_node("h1", unschedulable=True, taints=(Taint("team", "ml", "NoSchedule"),))]))

    node = Node.objects.get(name="h1")
    assert node.gpu_product == H100
    assert node.gpu_model == "H100-SXM5-80GB"
    assert (node.sharing_mode, node.sharing_replicas, node.gpu_count) == ("exclusive", 1, 2)
    assert node.cordoned is True and node.ready is True
    assert node.taints == [{"key": "team", "value": "ml", "effect": "NoSchedule"}]
    assert node.labels["nvidia.com/gpu.count"] == "2"
    assert (node.cpu_allocatable_milli, node.memory_allocatable_mib) == (64000, 524288)
    assert node.last_seen is not None
    assert [(g.index, g.uuid, g.model, g.memory_mib, g.mig_enabled) for g in node.gpus.order_by("index")] == [
        (0, "GPU-h1-0", "H100-SXM5-80GB", H100_MIB, False),
        (1, "GPU-h1-1", "H100-SXM5-80GB", H100_MIB, False),
    ]
    for index in (0, 1):
        [partition] = partitions_of("h1", index)
        assert (partition.kind, partition.slot, partition.share_milli, partition.memory_mib) == ("exclusive", 0, 1000, H100_MIB)
        assert is_free(partition)
    assert report.created == {"nodes": 1, "gpus": 2, "partitions": 2}
    assert report.changed


@pytest.mark.django_db
@pytest.mark.parametrize(
    "replicas, share_milli, memory_mib",
    [
        (2, 500, 20480),  # 1000 // 2; 40960 // 2
        (4, 250, 10240),  # 1000 // 4; 40960 // 4
        (3, 333, 13653),  # 1000 // 3; 40960 // 3 (rounded down: never more than the GPU)
    ],
)
def test_it_gives_uniform_mps_nodes_r_slots_of_a_rth_of_compute_and_memory(replicas, share_milli, memory_mib):
    node = gpu_node("a1", product=A100, memory_mib=A100_MIB, labels=sharing_labels("mps", replicas, f"mps-{replicas}"))
    sync_inventory(FakeCluster([node]))

    row = Node.objects.get(name="a1")
    assert (row.sharing_mode, row.sharing_replicas, row.applied_config) == ("mps", replicas, f"mps-{replicas}")
    assert row.gpu_model == "A100-SXM4-40GB"
    for index in (0, 1):
        slots = partitions_of("a1", index)
        assert [(p.kind, p.slot, p.share_milli, p.memory_mib) for p in slots] == [
            ("mps", slot, share_milli, memory_mib) for slot in range(replicas)
        ]


@pytest.mark.django_db
def test_it_gives_time_sliced_replicas_a_share_of_compute_but_the_whole_memory():
    sync_inventory(FakeCluster([gpu_node("t1", labels=sharing_labels("time-slicing", 4, "ts-4"))]))

    row = Node.objects.get(name="t1")
    assert (row.sharing_mode, row.sharing_replicas, row.applied_config) == ("timeslice", 4, "ts-4")
    assert [(p.kind, p.share_milli, p.memory_mib) for p in partitions_of("t1", 0)] == [("timeslice", 250, H100_MIB)] * 4


@pytest.mark.django_db
def test_it_creates_one_partition_per_mig_device_with_catalog_geometry_and_exclusive_partitions_for_other_gpus():
    node = gpu_node(
        "m1",
        gpu_count=2,
        labels={"nvidia.com/mig.config": "mixed-a", "nvidia.com/device-plugin.config": "ignored-on-mig"},
        mig={0: [("2g.20gb", 6, 2), ("3g.40gb", 0, 4), ("2g.20gb", 4, 2)]},
    )
    sync_inventory(FakeCluster([node]))

    row = Node.objects.get(name="m1")
    assert (row.sharing_mode, row.sharing_replicas, row.applied_config) == ("mig", 1, "mixed-a")
    assert gpu("m1", 0).mig_enabled and not gpu("m1", 1).mig_enabled
    assert [
        (p.kind, p.slot, p.mig_profile, p.mig_start, p.mig_size, p.share_milli, p.memory_mib, p.mig_device_uuid)
        for p in partitions_of("m1", 0)
    ] == [
        # share = compute slices * 1000 // 7; memory = the instance memory NVML reports (catalog)
        ("mig", 0, "3g.40gb", 0, 4, 428, 40448, "MIG-m1-0-0"),
        ("mig", 1, "2g.20gb", 4, 2, 285, 20096, "MIG-m1-0-4"),
        ("mig", 2, "2g.20gb", 6, 2, 285, 20096, "MIG-m1-0-6"),
    ]
    assert [(p.kind, p.share_milli, p.memory_mib) for p in partitions_of("m1", 1)] == [("exclusive", 1000, H100_MIB)]


@pytest.mark.django_db
def test_it_builds_weighted_mps_partitions_from_the_pods_holding_shares():
    cluster = FakeCluster(
        [gpu_node("w1", product=A100, memory_mib=A100_MIB, labels=WEIGHTED_LABELS)],
        [
            pod("serving/llama3-8b-0", "w1", gpus="0", share_milli=500, memory_mib=20480),
            pod("serving/phi3-0", "w1", gpus="0", share_milli=250),
        ],
    )
    sync_inventory(cluster)

    row = Node.objects.get(name="w1")
    assert (row.sharing_mode, row.sharing_replicas, row.applied_config) == ("mps-weighted", 4, "gpuplane-weighted-4")
    assert [(p.kind, p.share_milli, p.memory_mib, p.pod) for p in partitions_of("w1", 0)] == [
        ("mps-weighted", 500, 20480, "serving/llama3-8b-0"),
        ("mps-weighted", 250, 10240, "serving/phi3-0"),  # no memory annotation: 40960 * 250 // 1000
    ]
    # Free weighted capacity is implicit: no rows for it.
    assert partitions_of("w1", 1) == []
    assert (gpu("w1", 0).allocated_milli, gpu("w1", 0).allocated_memory_mib) == (750, 30720)  # 500+250; 20480+10240
    assert (gpu("w1", 1).allocated_milli, gpu("w1", 1).allocated_memory_mib) == (0, 0)


@pytest.mark.django_db
def test_it_counts_a_weighted_pod_without_a_share_as_one_of_r_replicas_and_reports_shares_that_do_not_fit():
    cluster = FakeCluster(
        [gpu_node("w1", product=A100, memory_mib=A100_MIB, gpu_count=1, labels=WEIGHTED_LABELS)],
        [
            pod("a/big", "w1", gpus="0", share_milli=800),
            pod("b/plain", "w1"),  # 1000 // 4 = 250 would make 1050
        ],
    )
    report = sync_inventory(cluster)

    assert [p.pod for p in partitions_of("w1", 0)] == ["a/big"]
    assert report.unplaced_pods == ["b/plain"]
    assert gpu("w1", 0).allocated_milli == 800


@pytest.mark.django_db
def test_it_reports_an_unknown_gpu_product_without_crashing_and_logs_it_once(caplog):
    cluster = FakeCluster([gpu_node("x1", product="NVIDIA-Imaginary-9000", memory_mib=65536)])
    with caplog.at_level(logging.WARNING, logger="nodes.inventory"):
        first = sync_inventory(cluster)
        second = sync_inventory(cluster)

    assert first.unknown_products == ["NVIDIA-Imaginary-9000"]
    assert second.unknown_products == ["NVIDIA-Imaginary-9000"]  # reported by every run...
    assert sum("NVIDIA-Imaginary-9000" in r.getMessage() for r in caplog.records) <= 1  # ...logged at most once per process
    row = Node.objects.get(name="x1")
    assert (row.gpu_product, row.gpu_model) == ("NVIDIA-Imaginary-9000", "")
    assert [g.model for g in row.gpus.all()] == ["", ""]
    assert [(p.kind, p.memory_mib) for p in partitions_of("x1", 0)] == [("exclusive", 65536)]


@pytest.mark.django_db
def test_it_maps_a_shared_product_name_onto_its_catalog_model():
    node = gpu_node("a1", product=A100 + "-SHARED", memory_mib=A100_MIB, labels=sharing_labels("mps", 2, "mps-2"))
    report = sync_inventory(FakeCluster([node]))
    assert report.unknown_products == []
    assert Node.objects.get(name="a1").gpu_model == "A100-SXM4-40GB"
