"""Inventory sync test support: FakeCluster, builders of the ClusterNode / ClusterPod value
objects the sync reads, and readers of the rows it writes.

FakeCluster is a backend that just returns the value objects it was given, so each rule is tested
without the simulator in the way.
"""
from __future__ import annotations

from collections.abc import Iterable

from django.test.utils import CaptureQueriesContext

from nodes.cluster.base import ClusterNode, ClusterPod, GPUDevice, MIGDevice
from nodes.holds import free_partition_filter, with_holder_id
from nodes.models import GPU, Node, Partition
from nodes.vocabulary import Taint
from scheduler.models import Deployment, Placement
from tests.nodes.factories import hold_partition

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
    annotations: dict[str, str] | None = None,
    cpu_milli: int = 0,
    host_memory_mib: int = 0,
) -> ClusterPod:
    namespace, name = key.split("/")
    annotations = dict(annotations or {})
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
        gpu_requests={"nvidia.com/gpu": 1} if resources is None else resources,
        cpu_request_milli=cpu_milli,
        memory_request_mib=host_memory_mib,
    )


def partitions_of(node: str, index: int) -> list[Partition]:
    return list(Partition.objects.filter(gpu__node__name=node, gpu__index=index).order_by("slot"))


def is_free(partition: Partition) -> bool:
    """Whether the partition is used by no pod and held by no holder (asked through nodes.holds)."""
    return Partition.objects.filter(free_partition_filter(), pk=partition.pk).exists()


def holder_id(partition: Partition) -> int | None:
    """The id of the partition's holder (a placement), or None; asked through nodes.holds."""
    return with_holder_id(Partition.objects.filter(pk=partition.pk)).values_list("holder_id", flat=True).get()


def gpu(node: str, index: int) -> GPU:
    return GPU.objects.get(node__name=node, index=index)


def snapshot() -> dict[str, list[dict]]:
    """Every inventory row's fields, but Node.last_seen (when the sync last wrote the node)."""
    return {
        "nodes": [{k: v for k, v in row.items() if k != "last_seen"} for row in Node.objects.order_by("pk").values()],
        "gpus": list(GPU.objects.order_by("pk").values()),
        "partitions": list(Partition.objects.order_by("pk").values()),
    }


def writes(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]


def no_writes(sql: list[str]) -> bool:
    """The writes of a sync that changed nothing: none (unchanged nodes are not even touched)."""
    return sql == []


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


def placement_on(partition: Partition, workload: str = "llama-0") -> Placement:
    """Make a placement of a new deployment in namespace "serving" hold the partition."""
    deployment = Deployment.objects.create(name="llama", model="llama-3-8b", memory_mib=16384, namespace="serving")
    placement = Placement.objects.create(deployment=deployment, node=partition.gpu.node, workload_name=workload)
    hold_partition(partition, placement)
    return placement
