"""Inventory sync: ClusterNode / ClusterPod lists -> Node, GPU and Partition rows.

Most tests drive the sync with FakeCluster, a backend that just returns the value objects it was
given, so each rule is tested without the simulator in the way. The arithmetic of the expected
shares and memory is written next to each assertion.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nodes.cluster.base import ClusterNode, ClusterPod, GPUDevice, MIGDevice, Taint, get_cluster
from nodes.demo import load_demo_cluster
from nodes.inventory.sync import sync_inventory
from nodes.models import GPU, Node, Partition
from scheduler.models import Deployment, Placement

H100 = "NVIDIA-H100-80GB-HBM3"
H100_MIB = 81559  # what GFD reports for an H100 80GB HBM3
A100 = "NVIDIA-A100-SXM4-40GB"
A100_MIB = 40960


class FakeCluster:
    """A ClusterBackend that only lists: the nodes and pods it holds, as given."""

    def __init__(self, nodes: Iterable[ClusterNode] = (), pods: Iterable[ClusterPod] = ()) -> None:
        self.nodes = list(nodes)
        self.pods = list(pods)

    def list_nodes(self) -> list[ClusterNode]:
        return list(self.nodes)

    def list_gpu_pods(self) -> list[ClusterPod]:
        return list(self.pods)


def gpu_node(
    name: str,
    *,
    product: str = H100,
    gpu_count: int = 2,
    memory_mib: int = H100_MIB,
    labels: dict[str, str] | None = None,
    mig: dict[int, list[tuple[str, int, int]]] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    taints: tuple[Taint, ...] = (),
    uuid_prefix: str = "GPU",
) -> ClusterNode:
    """A node as the parser would build it; `mig` maps GPU index -> [(profile, start, size)]."""
    mig = mig or {}
    gpus = tuple(
        GPUDevice(
            index=index,
            uuid=f"{uuid_prefix}-{name}-{index}",
            product=product,
            memory_mib=memory_mib,
            mig_enabled=index in mig,
            mig_devices=tuple(
                MIGDevice(profile=p, start=s, size=z, uuid=f"MIG-{name}-{index}-{s}") for p, s, z in mig.get(index, [])
            ),
        )
        for index in range(gpu_count)
    )
    return ClusterNode(
        name=name,
        labels={
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpu_count),
            "nvidia.com/gpu.memory": str(memory_mib),
            **(labels or {}),
        },
        annotations={},
        taints=taints,
        ready=ready,
        unschedulable=unschedulable,
        cpu_allocatable_milli=64000,
        memory_allocatable_mib=524288,
        allocatable={"nvidia.com/gpu": gpu_count},
        gpus=gpus,
    )


def sharing_labels(strategy: str, replicas: int, config: str) -> dict[str, str]:
    return {
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/gpu.replicas": str(replicas),
        "nvidia.com/device-plugin.config": config,
    }


WEIGHTED_LABELS = {**sharing_labels("time-slicing", 4, "gpuplane-weighted-4"), "gpuplane.io/sharing-mode": "mps-weighted"}


def pod(
    key: str,
    node: str,
    resources: dict[str, int] | None = None,
    *,
    gpus: str | None = None,
    share_milli: int | None = None,
    mig_start: int | None = None,
    memory_mib: int | None = None,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
) -> ClusterPod:
    namespace, name = key.split("/")
    annotations = {}
    if gpus is not None:
        annotations["gpuplane.io/gpus"] = gpus
    if share_milli is not None:
        annotations["gpuplane.io/share-milli"] = str(share_milli)
    if mig_start is not None:
        annotations["gpuplane.io/mig-start"] = str(mig_start)
    if memory_mib is not None:
        annotations["gpuplane.io/memory-mib"] = str(memory_mib)
    return ClusterPod(
        namespace=namespace,
        name=name,
        node_name=node,
        phase=phase,
        ready=phase == "Running",
        labels=labels or {},
        annotations=annotations,
        gpu_requests=resources or {"nvidia.com/gpu": 1},
    )


def partitions_of(node: str, index: int) -> list[Partition]:
    return list(Partition.objects.filter(gpu__node__name=node, gpu__index=index).order_by("slot"))


def gpu(node: str, index: int) -> GPU:
    return GPU.objects.get(node__name=node, index=index)


def snapshot() -> dict[str, list[dict]]:
    return {
        "nodes": list(Node.objects.order_by("pk").values()),
        "gpus": list(GPU.objects.order_by("pk").values()),
        "partitions": list(Partition.objects.order_by("pk").values()),
    }


def writes(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]


def every_mode_cluster() -> FakeCluster:
    """One node per sharing mode, with pods on each."""
    return FakeCluster(
        nodes=[
            gpu_node("excl", gpu_count=4, taints=(Taint("nvidia.com/gpu", "", "NoSchedule"),)),
            gpu_node(
                "mig",
                gpu_count=3,
                labels={"nvidia.com/mig.config": "gpuplane-mixed", "nvidia.com/mig.config.state": "success"},
                mig={0: [("3g.40gb", 0, 4), ("2g.20gb", 4, 2), ("2g.20gb", 6, 2)], 1: [("1g.10gb", s, 1) for s in range(7)]},
            ),
            gpu_node("mps2", product=A100, memory_mib=A100_MIB, labels=sharing_labels("mps", 2, "gpuplane-mps-2")),
            gpu_node("mps4", product=A100, memory_mib=A100_MIB, labels=sharing_labels("mps", 4, "gpuplane-mps-4")),
            gpu_node("ts4", labels=sharing_labels("time-slicing", 4, "gpuplane-ts-4")),
            gpu_node("wmps", product=A100, memory_mib=A100_MIB, labels=WEIGHTED_LABELS),
        ],
        pods=[
            pod("training/llama3-70b-0", "excl", {"nvidia.com/gpu": 2}, gpus="1,2"),
            pod("serving/whisper-0", "mig", {"nvidia.com/mig-2g.20gb": 1}, gpus="0", mig_start=6),
            pod("serving/embed-0", "mig", {"nvidia.com/mig-1g.10gb": 1}),
            pod("serving/bert-0", "mps2", gpus="1"),
            pod("serving/bert-1", "mps4"),
            pod("dev/notebook-0", "ts4", memory_mib=16384),
            pod("serving/llama3-8b-0", "wmps", gpus="0", share_milli=500, memory_mib=20480),
            pod("serving/phi3-0", "wmps", gpus="0", share_milli=250),
        ],
    )


# --- rows per sharing mode -----------------------------------------------------------------------


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
        assert partition.is_free
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
        # share = compute slices * 1000 // 7; memory = memory slices * 81559 // 8 (catalog)
        ("mig", 0, "3g.40gb", 0, 4, 428, 40779, "MIG-m1-0-0"),
        ("mig", 1, "2g.20gb", 4, 2, 285, 20389, "MIG-m1-0-4"),
        ("mig", 2, "2g.20gb", 6, 2, 285, 20389, "MIG-m1-0-6"),
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


# --- pods ---------------------------------------------------------------------------------------


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
    # 285 + 285 + 142 milli (2g, 2g, 1g: slices * 1000 // 7); 20389 + 20389 + 10194 MiB
    assert (gpu("m1", 0).allocated_milli, gpu("m1", 0).allocated_memory_mib) == (712, 50972)


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
    assert all(p.is_free for p in partitions_of("m2", 0))
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


# --- node / GPU lifecycle, placements ------------------------------------------------------------


def _placement_on(partition: Partition, workload: str = "llama-0") -> Placement:
    deployment = Deployment.objects.create(name="llama", model="llama-3-8b", memory_mib=16384, namespace="serving")
    placement = Placement.objects.create(deployment=deployment, node=partition.gpu.node, workload_name=workload)
    Partition.objects.filter(pk=partition.pk).update(placement=placement)
    return placement


@pytest.mark.django_db
def test_it_deletes_nodes_gone_from_the_cluster_unless_gpuplane_placed_onto_them():
    cluster = FakeCluster([gpu_node("keep"), gpu_node("drop"), gpu_node("held")])
    sync_inventory(cluster)
    placement = _placement_on(partitions_of("held", 0)[0])

    cluster.nodes = [gpu_node("keep")]
    report = sync_inventory(cluster)

    assert set(Node.objects.values_list("name", flat=True)) == {"keep", "held"}
    held = Node.objects.get(name="held")
    assert held.ready is False
    assert report.gone_nodes_kept == ["held"]
    assert report.deleted["nodes"] == 1
    # The held partition survives untouched; the free one on the vanished GPU 0 cannot be used.
    assert [p.placement_id for p in partitions_of("held", 0)] == [placement.pk]
    assert not GPU.objects.filter(node=held, index=1).exists()

    cluster.nodes = [gpu_node("keep"), gpu_node("held")]
    sync_inventory(cluster)
    assert Node.objects.get(name="held").ready is True
    assert [p.placement_id for p in partitions_of("held", 0)] == [placement.pk]
    assert partitions_of("held", 1)[0].is_free


@pytest.mark.django_db
def test_it_never_touches_or_deletes_a_partition_held_by_a_placement():
    cluster = FakeCluster([gpu_node("a1", product=A100, memory_mib=A100_MIB, gpu_count=1, labels=sharing_labels("mps", 2, "mps-2"))])
    sync_inventory(cluster)
    held_partition = partitions_of("a1", 0)[1]
    placement = _placement_on(held_partition)
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
    assert (kept.kind, kept.slot, kept.share_milli, kept.placement_id, kept.pod) == ("mps", 1, 500, placement.pk, "")
    [exclusive] = [p for p in rows if p.pk != held_partition.pk]
    assert (exclusive.kind, exclusive.slot, exclusive.pod) == ("exclusive", 0, "other/x")
    assert report.unplaced_pods == []  # the gpuplane pod is its placement's, not an extra occupant
    # Both count, capped at the GPU: 1000 + 500 -> 1000; 40960 + 20480 -> 40960.
    assert (gpu("a1", 0).allocated_milli, gpu("a1", 0).allocated_memory_mib) == (1000, A100_MIB)


@pytest.mark.django_db
def test_gpus_gone_from_a_node_are_deleted_unless_a_placement_holds_one_of_their_partitions():
    cluster = FakeCluster([gpu_node("h1", gpu_count=4)])
    sync_inventory(cluster)
    placement = _placement_on(partitions_of("h1", 3)[0])

    cluster.nodes = [gpu_node("h1", gpu_count=2)]
    report = sync_inventory(cluster)

    assert sorted(GPU.objects.filter(node__name="h1").values_list("index", flat=True)) == [0, 1, 3]
    assert [p.placement_id for p in partitions_of("h1", 3)] == [placement.pk]
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


# --- idempotence --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_inventory_sync_run_twice_leaves_the_database_unchanged_the_second_time():
    cluster = every_mode_cluster()
    first = sync_inventory(cluster)
    assert first.changed and first.unplaced_pods == []
    assert set(Node.objects.values_list("sharing_mode", flat=True)) == {"exclusive", "mig", "mps", "timeslice", "mps-weighted"}
    before = snapshot()

    with CaptureQueriesContext(connection) as queries:
        second = sync_inventory(cluster)

    assert writes(queries) == []
    assert snapshot() == before
    assert not second.changed
    assert second.heartbeats == 0


@pytest.mark.django_db
def test_a_steady_cluster_with_placements_stays_write_free():
    cluster = every_mode_cluster()
    sync_inventory(cluster)
    _placement_on(partitions_of("mps4", 1)[3])
    sync_inventory(cluster)  # takes the placement into the GPU's totals
    before = snapshot()

    with CaptureQueriesContext(connection) as queries:
        sync_inventory(cluster)

    assert writes(queries) == []
    assert snapshot() == before


@pytest.mark.django_db
def test_last_seen_is_refreshed_only_when_older_than_the_heartbeat(settings):
    settings.GPUPLANE_INVENTORY_HEARTBEAT_S = 300
    cluster = FakeCluster([gpu_node("h1"), gpu_node("h2")])
    sync_inventory(cluster)
    old = timezone.now() - timedelta(seconds=301)
    Node.objects.filter(name="h1").update(last_seen=old)

    report = sync_inventory(cluster)

    assert report.heartbeats == 1
    assert not report.changed
    assert Node.objects.get(name="h1").last_seen > old


@pytest.mark.django_db
def test_inventory_sync_run_twice_on_the_demo_cluster_leaves_the_database_unchanged_the_second_time():
    load_demo_cluster()  # seeds the simulated cluster and runs the first sync
    before = snapshot()
    assert len(before["nodes"]) == 12

    with CaptureQueriesContext(connection) as queries:
        second = sync_inventory(get_cluster())  # a fresh backend reading the same state file

    assert writes(queries) == []
    assert snapshot() == before
    assert not second.changed and second.unplaced_pods == [] and second.unknown_products == []
