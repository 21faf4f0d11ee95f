"""Score plugins, one table per plugin, with the arithmetic written out."""
from __future__ import annotations

import numpy as np
import pytest

from nodes.vocabulary import PartitionKind, SharingMode
from scheduler.core import ClusterSnapshot, Priority
from scheduler.core.fragmentation_columns import TypicalPods
from scheduler.core.plugins import (
    BestFit,
    FragmentationGradient,
    LeastUtilized,
    PartitionCompat,
    PowerEfficiency,
    PriorityPower,
    WorkloadAffinity,
)
from scheduler.core.plugins.fragmentation_gradient import squash
from tests.scheduler.core.builders import A100, GIB, H100, make_node, occupy, request, scores


def test_power_efficiency():
    snapshot = ClusterSnapshot([make_node("h100", H100), make_node("a100", A100), make_node("l4", "L4")])
    # raw = 1000 x TFLOPS / W: H100 989000 / 700 = 1412; A100 312000 / 400 = 780; L4 121000 / 72 = 1680.
    # normalized = 100 x raw // max: H100 141200 // 1680 = 84; A100 78000 // 1680 = 46; L4 100.
    assert scores(PowerEfficiency(), snapshot, request()) == {
        "h100": (1412, 84), "a100": (780, 46), "l4": (1680, 100),
    }
    # Normalized over the feasible nodes only: without the L4, H100 is the max.
    # A100: 78000 // 1412 = 55.
    assert scores(PowerEfficiency(), snapshot, request(), ["h100", "a100"]) == {"h100": (1412, 100), "a100": (780, 55)}


def test_workload_affinity():
    snapshot = ClusterSnapshot([
        make_node("a100", A100), make_node("a100-80", "A100-SXM4-80GB"), make_node("h100", H100),
        make_node("l4", "L4"), make_node("h200", "H200-SXM-141GB"),
    ])
    # 8 GiB is medium: prefers A100 (312 TFLOPS). Same family: 100. Others 50 x min // max:
    # H100 50 x 312 // 989 = 15; L4 50 x 121 // 312 = 19; H200 (989) 15.
    assert {name: raw for name, (raw, _) in scores(WorkloadAffinity(), snapshot, request(8)).items()} == {
        "a100": 100, "a100-80": 100, "h100": 15, "l4": 19, "h200": 15,
    }
    # 40 GiB is large: prefers H100 (989). A100: 50 x 312 // 989 = 15; H200 50 x 989 // 989 = 50.
    large = scores(WorkloadAffinity(), snapshot, request(40))
    assert (large["h100"], large["a100"], large["h200"]) == ((100, 100), (15, 15), (50, 50))


def test_least_utilized():
    both_60 = make_node("both-60", util=60.0)
    mixed = make_node("mixed")
    mixed.gpus[0].utilization_pct, mixed.gpus[1].utilization_pct = 60.0, 40.0
    allocated = make_node("allocated", mode=SharingMode.MPS_WEIGHTED, replicas=4)
    allocated.gpus[0].utilization_pct = 40.0  # GPU 1 has no sample but holds a 50 % share
    occupy(allocated, 1, 500, 8 * GIB, "team/new")
    snapshot = ClusterSnapshot([both_60, mixed, allocated, make_node("idle")])
    # load = mean over GPUs of max(utilization %, allocated %); score = floor(100 - load).
    assert scores(LeastUtilized(), snapshot, request()) == {
        "both-60": (40, 40),  # (60 + 60) / 2 = 60
        "mixed": (50, 50),  # (60 + 40) / 2 = 50
        "allocated": (55, 55),  # (max(40, 0) + max(0, 50)) / 2 = 45
        "idle": (100, 100),  # no samples, nothing allocated
    }


@pytest.mark.parametrize(
    ("priority", "h100", "a100"),
    [
        # HIGH: TFLOPS, 100 x raw // max: A100 31200 // 989 = 31.
        (Priority.HIGH, (989, 100), (312, 31)),
        # LOW: TDP, 100 x min // raw: H100 40000 // 700 = 57.
        (Priority.LOW, (700, 57), (400, 100)),
        (Priority.MEDIUM, (50, 50), (50, 50)),
    ],
)
def test_priority_power(priority, h100, a100):
    snapshot = ClusterSnapshot([make_node("h100", H100), make_node("a100", A100)])
    assert scores(PriorityPower(), snapshot, request(priority=priority)) == {"h100": h100, "a100": a100}


def _compat_nodes() -> ClusterSnapshot:
    return ClusterSnapshot([
        make_node("exclusive"),
        make_node("mig", mode=SharingMode.MIG, mig={"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}),
        make_node("mps-2", mode=SharingMode.MPS, replicas=2),
        make_node("mps-4", mode=SharingMode.MPS, replicas=4),
        make_node("weighted", mode=SharingMode.MPS_WEIGHTED, replicas=4),
        make_node("slice-2", mode=SharingMode.TIMESLICE, replicas=2),
    ])


def test_partition_compat_for_a_50_percent_request():
    result = scores(PartitionCompat(), _compat_nodes(), request(8), ["exclusive", "mig", "mps-2", "weighted", "slice-2"])
    # 100 x 500 // unit share: whole 1000 -> 50; slot 500 -> 100; weighted share = the request
    # -> 100; a time-slice slot of 500 -> 100, halved (no isolation) -> 50. MIG is sized by
    # memory: 8 GB takes the 2g.10gb, 100 x 8192 // 9856 (NVML's instance memory) = 83.
    assert {name: raw for name, (raw, _) in result.items()} == {
        "exclusive": 50, "mig": 83, "mps-2": 100, "weighted": 100, "slice-2": 50,
    }


def test_partition_compat_for_a_25_percent_request():
    result = scores(PartitionCompat(), _compat_nodes(), request(2))
    # 100 x 250 // unit: whole 1000 -> 25; R=2 slot 500 -> 50; R=4 slot 250 -> 100; weighted
    # 100; slice R=2 50 // 2 = 25. MIG by memory: 2 GB takes the 1g.5gb, 100 x 2048 // 4864 = 42.
    assert {name: raw for name, (raw, _) in result.items()} == {
        "exclusive": 25, "mig": 42, "mps-2": 50, "mps-4": 100, "weighted": 100, "slice-2": 25,
    }


def test_partition_compat_for_a_stated_25_percent_share_on_mig():
    # A stated share binds MIG too: 2 GB at 25 % needs at least a 2g instance (285 milli); the
    # 2g.10gb scores the larger ratio, max(100 x 250 // 285 = 87, 100 x 2048 // 10240 = 20) = 87.
    result = scores(PartitionCompat(), _compat_nodes(), request(2, share_milli=250), ["mig"])
    assert result["mig"][0] == 87


def test_best_fit():
    nodes = []
    for name, busy in (("one-free", 7), ("four-free", 4), ("all-free", 0)):
        node = make_node(name, H100, gpus=8)
        for gpu in range(busy):
            occupy(node, gpu, 1000, 81559, f"team/{gpu}", PartitionKind.EXCLUSIVE)
        nodes.append(node)
    snapshot = ClusterSnapshot(nodes)
    # C = 8000; L = free - 1000: 0 -> 100 x 8000 // 8000 = 100; 3000 -> 100 x 5000 // 8000 = 62;
    # 7000 -> 100 x 1000 // 8000 = 12.
    assert scores(BestFit(), snapshot, request(40)) == {
        "one-free": (100, 100), "four-free": (62, 62), "all-free": (12, 12),
    }


def _weighted(name: str, held: list[int]) -> object:
    node = make_node(name, mode=SharingMode.MPS_WEIGHTED, replicas=4, gpus=len(held))
    for gpu, share in enumerate(held):
        if share:
            occupy(node, gpu, share, GIB, f"team/{name}-{gpu}")
    return node


def test_fragmentation_gradient():
    snapshot = ClusterSnapshot([
        _weighted("two-gpus", [800, 0]),  # GPU 0: 200 free, GPU 1: 1000 free
        _weighted("tight", [700]),  # 300 free
        _weighted("fills-a-hole", [900, 0]),  # GPU 0: 100 free
    ])
    plugin = FragmentationGradient(typical_pods=[{"share_milli": 250, "gpu_count": 1, "weight": 1}])
    quarter = scores(plugin, snapshot, request(1, share_milli=250), ["two-gpus", "tight"])
    # two-gpus: the 250 goes to GPU 1 (GPU 0 cannot take it). F_before = 200 (GPU 0 cannot host
    # a 250 pod), F_after = 200 -> raw 0 -> FGD's squash 100 / (1 + e^0) = 50.
    # tight: F_before = 0 (its GPU hosts 250); after, 50 is left, which hosts nothing, and the
    # node then runs no typical pod: F_after = 50 -> raw -50 -> 100 / (1 + e^0.05) = 48.75 -> 48.
    assert quarter == {"two-gpus": (0, 50), "tight": (-50, 48)}
    # A 100 milli pod on fills-a-hole takes GPU 0 (least free share that covers it):
    # F_before = 100, F_after = 0 -> raw 100 -> 100 / (1 + e^-0.1) = 52.5 -> 52.
    assert scores(plugin, snapshot, request(1, share_milli=100), ["fills-a-hole"]) == {"fills-a-hole": (100, 52)}
    both = scores(plugin, snapshot, request(1, share_milli=100), ["two-gpus", "fills-a-hole"])
    # two-gpus: 100 on GPU 0 (200 free, the tightest) leaves 100 that hosts no 250: F 200 -> 100,
    # raw 100 as well: a tie.
    assert both == {"two-gpus": (100, 52), "fills-a-hole": (100, 52)}


def test_the_squash_is_fgds_sigmoid_truncated():
    # 100 / (1 + e^(-x / 1000)): 0 -> 50; 200 -> 54.98 -> 54; -500 -> 37.75 -> 37; -2000 -> 11.9 -> 11.
    assert squash(np.array([0, 200, -500, -2000, 10**6, -(10**6)])).tolist() == [50, 54, 37, 11, 100, 0]


def test_fragmentation_gradient_counts_cpu_and_gpu_models():
    nodes = [_weighted("roomy", [0]), _weighted("cpu-short", [0]), _weighted("t4", [0])]
    for node in nodes:
        node.cpu_allocatable_milli = 8000
    nodes[1].cpu_requested_milli = 6000  # 2000 free
    nodes[2].gpu_model = "T4"
    snapshot = ClusterSnapshot(nodes)
    plugin = FragmentationGradient(typical_pods=[
        {"share_milli": 500, "gpu_count": 1, "weight": 1, "cpu_milli": 2000, "gpu_models": ["A100"]},
    ])
    got = scores(plugin, snapshot, request(1, share_milli=250, cpu_milli=1000))
    # roomy: 1000 free, hosts the class before and after (750 left, 7000 CPU): F 0 -> 0, raw 0 -> 50.
    # cpu-short: 2000 CPU free runs the class before; 1000 after does not, so its 750 free
    # milli all become fragment: raw -750 -> 100 / (1 + e^0.75) = 32.1 -> 32.
    # t4: the class accepts A100 only, so all free milli is fragment before (1000) and after
    # (750): raw +250 -> 56.2 -> 56: the placement uses up capacity nobody of the class could use.
    assert got == {"roomy": (0, 50), "cpu-short": (-750, 32), "t4": (250, 56)}


def test_the_bounded_measure_counts_gpus_the_cpu_left_cannot_feed():
    node = _weighted("four-free", [0, 0, 0, 0])
    node.cpu_allocatable_milli = 16000
    snapshot = ClusterSnapshot([node])
    pods = [{"share_milli": 1000, "gpu_count": 1, "weight": 1, "cpu_milli": 12000}]
    bounded = FragmentationGradient(typical_pods=pods)
    fgd = FragmentationGradient(typical_pods=pods, cpu_bounded=False)
    # A 4,000-milli CPU-only pod leaves 12,000 CPU: one more whole-GPU pod still fits, so FGD sees
    # no fragment before or after (raw 0). Bounded: before, 16000 / 12000 = 1.33 pods' CPU for 4
    # GPUs -> usable 4000 x 1.33 / 4 = 1333, F = 4000 - 1333 = 2667; after, 12000 / 12000 = 1 pod
    # -> usable 1000, F = 3000: raw -333 (the pod strands a third of a GPU more).
    cpu_only = request(1, gpu_count=0, cpu_milli=4000)
    assert scores(fgd, snapshot, cpu_only) == {"four-free": (0, 50)}
    assert scores(bounded, snapshot, cpu_only) == {"four-free": (-333, 41)}


def test_fragmentation_counts_capacity_a_class_cannot_use():
    total = np.array([[2500.0]])  # GPUs free: 1000, 1000, 500
    cpu = np.array([[10**9]])

    def f(pods: list[dict], hosted: list[int], hosts: list[int]) -> float:
        table = TypicalPods.build(pods, cpu_bounded=False)
        access = np.ones((len(pods), 1), dtype=bool)
        return float(table.fragment(access, total, np.array([hosted]).T, np.array([hosts]).T, cpu)[0])

    whole2 = {"share_milli": 1000, "gpu_count": 2, "weight": 1}
    # Whole-GPU pods, 2 per pod: 2 GPUs host them (2000 milli); only the 500 GPU is fragment.
    assert f([whole2], [2000], [2]) == 500
    # 3 whole GPUs per pod: the node cannot run it, all 2500 free is fragment.
    assert f([{**whole2, "gpu_count": 3}], [2000], [2]) == 2500
    # 600 milli pods: the 1000 GPUs host them, the 500 cannot -> 500; half and half with the
    # 3-GPU class: 0.5 x 500 + 0.5 x 2500 = 1500.
    share = {"share_milli": 600, "gpu_count": 1, "weight": 1}
    assert f([share], [2000], [2]) == 500
    assert f([share, {**whole2, "gpu_count": 3}], [2000, 2000], [2, 2]) == 1500


def test_fragmentation_gradient_rejects_empty_typical_pods():
    with pytest.raises(ValueError):
        FragmentationGradient(typical_pods=[])


def test_fragmentation_gradient_counts_a_unit_larger_than_the_request_as_stranded():
    snapshot = ClusterSnapshot([
        make_node("mps-2", mode=SharingMode.MPS, replicas=2, gpus=1),
        make_node("mps-4", mode=SharingMode.MPS, replicas=4, gpus=1),
    ])
    plugin = FragmentationGradient(typical_pods=[{"share_milli": 250, "gpu_count": 1, "weight": 1}])
    got = scores(plugin, snapshot, request(4, share_milli=250))
    # Both nodes host 250 before and after (F 0 -> 0); mps-2's slot gives 500 for 250: raw -250
    # -> 100 / (1 + e^0.25) = 43.8 -> 43; mps-4: raw 0 -> 50.
    assert got == {"mps-2": (-250, 43), "mps-4": (0, 50)}
