"""Helpers for the placement service tests: the demo cluster, telemetry, capacity snapshots, invariants."""
from __future__ import annotations

from collections import Counter
from typing import Any

from django.conf import settings

from nodes.cluster.sim import SimulatedCluster
from nodes.demo import load_demo_cluster
from nodes.models import GPU, Node, Partition
from nodes.vocabulary import SHARE_MILLI_FULL, PartitionKind
from scheduler.models import Placement
from tests.nodes.factories import make_node


class FakeClock:
    """A clock the simulated cluster reads (``now`` seconds); tests move it on by hand."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def demo_cluster(clock: FakeClock | None = None) -> SimulatedCluster:
    """Load the demo into the (per-test) simulated cluster and the inventory; return the cluster.

    Pods of created workloads become ready 2 s (of ``clock``) after they bind.
    """
    load_demo_cluster()
    return SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE, clock=clock or FakeClock(), pod_ready_delay_s=2.0)


def empty_cluster(clock: FakeClock | None = None) -> SimulatedCluster:
    """A simulated cluster with no nodes: workloads are created but their pods stay Pending."""
    return SimulatedCluster(settings.GPUPLANE_SIMULATED_STATE, clock=clock or FakeClock())


def set_utilization(node_prefix: str, pct: float | None, *, gpus: list[int] | None = None) -> int:
    """Set the latest utilization of the GPUs of nodes whose name starts with ``node_prefix``."""
    queryset = GPU.objects.filter(node__name__startswith=node_prefix)
    if gpus is not None:
        queryset = queryset.filter(index__in=gpus)
    return queryset.update(utilization_pct=pct)


def whole_gpu_cluster(free_gpus: int, *, gpus_per_node: int = 8, busy_per_node: int = 1,
                      prefix: str = "node") -> list[Node]:
    """Exclusive H100 nodes with exactly ``free_gpus`` free whole GPUs.

    Each node has ``busy_per_node`` GPUs held by a pod (counters set as inventory sync would);
    the last node is cut short so that the free count is exact.
    """
    nodes = []
    free_per_node = gpus_per_node - busy_per_node
    remaining = free_gpus
    number = 0
    while remaining > 0:
        number += 1
        free_here = min(free_per_node, remaining)
        node = make_node(f"{prefix}-{number}", gpu_count=free_here + busy_per_node,
                         labels={"kubernetes.io/hostname": f"{prefix}-{number}"})
        for gpu in node.gpus.order_by("index")[:busy_per_node]:
            gpu.partitions.update(pod=f"other/busy-{number}-{gpu.index}")
            GPU.objects.filter(pk=gpu.pk).update(allocated_milli=SHARE_MILLI_FULL, allocated_memory_mib=gpu.memory_mib)
        remaining -= free_here
        nodes.append(node)
    return nodes


def capacity_state() -> dict[str, Any]:
    """Every GPU's counters and every partition's shape and holder: equal before and after means
    capacity is exactly as it was."""
    gpus = {uuid: (milli, memory) for uuid, milli, memory in
            GPU.objects.values_list("uuid", "allocated_milli", "allocated_memory_mib")}
    partitions = sorted(
        (gpu, slot, kind, share, memory, placement is not None, pod)
        for gpu, slot, kind, share, memory, placement, pod in Partition.objects.values_list(
            "gpu__uuid", "slot", "kind", "share_milli", "memory_mib", "hold__placement_id", "pod")
    )
    return {"gpus": gpus, "partitions": partitions}


def free_whole_gpus() -> int:
    return Partition.objects.filter(kind=PartitionKind.EXCLUSIVE, hold__isnull=True, pod="").count()


def check_invariants() -> None:
    """Fail unless the capacity accounting is sound.

    For every GPU: 0 <= allocated_milli <= 1000, 0 <= allocated_memory_mib <= memory_mib, and both
    counters equal the sum over its occupied partitions (a time-slice replica held by a placement
    is charged the placement's memory; one held by a pod what the pod declared, which only the
    counter records, so there the memory counter is at least the rest). No partition has two holders; no placement holds a
    partition on a node other than its own; an inactive placement holds nothing, an active one a
    partition per GPU it was given.
    """
    rows = list(Partition.objects.values_list(
        "gpu_id", "kind", "share_milli", "memory_mib", "hold__placement_id", "pod", "hold__placement__memory_mib",
        "hold__placement__node_id", "gpu__node_id", "hold__placement__status"))
    sums: dict[int, list[int]] = {}
    declared_by_pods: set[int] = set()
    for gpu_id, kind, share, memory, placement_id, pod, placement_memory, placement_node, gpu_node, status in rows:
        assert not (placement_id and pod), f"partition on GPU {gpu_id} held by a placement and a pod"
        if placement_id:
            assert placement_node == gpu_node, "a placement holds a partition on another node"
            assert status in ("reserved", "binding", "running"), f"a {status} placement still holds a partition"
        if placement_id or pod:
            total = sums.setdefault(gpu_id, [0, 0])
            total[0] += share
            if kind == PartitionKind.TIMESLICE and pod:
                declared_by_pods.add(gpu_id)  # what the pod declared is only in the counter
            else:
                total[1] += placement_memory if kind == PartitionKind.TIMESLICE else memory
    for pk, milli, memory, capacity in GPU.objects.values_list("pk", "allocated_milli", "allocated_memory_mib",
                                                                "memory_mib"):
        assert 0 <= milli <= SHARE_MILLI_FULL, (pk, milli)
        assert 0 <= memory <= capacity, (pk, memory, capacity)
        expected_milli, expected_memory = sums.get(pk, [0, 0])
        assert milli == expected_milli, (pk, milli, expected_milli)
        if pk in declared_by_pods:
            assert memory >= expected_memory, (pk, memory, expected_memory)
        else:
            assert memory == expected_memory, (pk, memory, expected_memory)
    held = Counter(Partition.objects.filter(hold__isnull=False).values_list("hold__placement_id", flat=True))
    for pk, gpu_indexes in Placement.objects.filter(
            node__isnull=False, status__in=("reserved", "binding", "running")).values_list("pk", "gpu_indexes"):
        assert held[pk] == len(gpu_indexes), f"placement {pk} holds {held[pk]} partitions for GPUs {gpu_indexes}"
